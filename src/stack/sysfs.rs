//! Reading a stack from sysfs, a mountinfo text and a crypttab text.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::crypttab;
use super::model::{
    is_memory_fs, is_network_fs, BusDevice, Crypt, CryptKind, DeviceSpec, Disk, Filesystem, Kind,
    Layer, LayerId, Loop, LvKind, Lvm, Mapper, Md, Multipath, Partition, Remote, Stack, Verity,
};
use super::superblock;

/// The most block devices visited (the stack of a real machine has a few).
pub const MAX_NODES: usize = 256;
/// The deepest chain of layers followed.
pub const MAX_DEPTH: usize = 32;
/// The most bytes read of one sysfs attribute.
pub const MAX_ATTR: usize = 4096;
/// The most entries read of one directory (`slaves/`, `md/`, disk/by-uuid...).
pub const MAX_ENTRIES: usize = 4096;

/// Where a stack is read from: normally `/sys`, `/dev`, the text of
/// `/proc/self/mountinfo` and of `/etc/crypttab`.
#[derive(Clone, Copy, Debug)]
pub struct Sources<'a> {
    pub sys: &'a Path,
    /// For md superblocks when sysfs lacks md/uuid, and the disk/by-uuid,
    /// by-label and by-partuuid links; None reads neither.
    pub dev: Option<&'a Path>,
    pub mountinfo: &'a str,
    pub crypttab: &'a str,
}

#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error("no mount on {0} in mountinfo")]
    NoMount(String),
    #[error(
        "{mountpoint} ({fstype} from {from}, device {device}) is not on a block device in {sys}"
    )]
    NoBlockDevice {
        mountpoint: String,
        fstype: String,
        from: String,
        device: String,
        sys: String,
    },
    #[error("cannot read {0}: {1}")]
    Sys(String, std::io::Error),
}

/// One mountinfo line's fields that matter here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub device: String,
    pub mountpoint: String,
    pub fstype: String,
    pub source: String,
    /// The superblock's options (an overlay's `lowerdir=` and `upperdir=`).
    pub options: String,
}

/// `s` with each escape `lead` followed by `digits` digits of `radix`
/// replaced by the byte it names.
fn unescape(s: &str, lead: &[u8], digits: usize, radix: u32) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let end = i + lead.len() + digits;
        if b[i..].starts_with(lead) && end <= b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + lead.len()..end])
                .ok()
                .and_then(|o| u8::from_str_radix(o, radix).ok())
            {
                out.push(v);
                i = end;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape_octal(s: &str) -> String {
    unescape(s, b"\\", 3, 8)
}

/// The last mount on `mountpoint` in a mountinfo text.
pub fn mount_of(mountinfo: &str, mountpoint: &str) -> Option<Mount> {
    mountinfo.lines().rev().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split_whitespace().collect();
        if unescape_octal(f.get(4)?) != mountpoint {
            return None;
        }
        let mut r = right.split_whitespace();
        Some(Mount {
            device: f.get(2)?.to_string(),
            mountpoint: mountpoint.to_string(),
            fstype: r.next().unwrap_or("").to_string(),
            source: unescape_octal(r.next().unwrap_or("")),
            options: r.next().unwrap_or("").to_string(),
        })
    })
}

/// The mount point of the filesystem that holds `path` (absolute, with no
/// `.`, `..` or symlinks): the longest mount point that is `path` or a
/// directory above it.
pub fn mount_holding(mountinfo: &str, path: &str) -> Option<String> {
    let mut best: Option<String> = None;
    for l in mountinfo.lines() {
        let Some((left, _)) = l.split_once(" - ") else {
            continue;
        };
        let Some(mp) = left.split_whitespace().nth(4).map(unescape_octal) else {
            continue;
        };
        let holds = mp == "/"
            || path == mp
            || path
                .strip_prefix(mp.as_str())
                .is_some_and(|rest| rest.starts_with('/'));
        if holds && best.as_ref().is_none_or(|b| mp.len() > b.len()) {
            best = Some(mp);
        }
    }
    best
}

/// The directories an overlay's layers are, from its superblock options as
/// mountinfo shows them: each `lowerdir=` (colon-separated, `\:` for a colon
/// in a name; also the `lowerdir+=`/`datadir+=` the new mount API takes) and
/// the `upperdir=`, in that order, each once. The work directory is on the
/// upper layer's filesystem.
pub fn overlay_dirs(options: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for opt in options.split(',') {
        let Some((key, value)) = opt.split_once('=') else {
            continue;
        };
        let value = unescape_octal(value);
        let dirs: Vec<String> = match key {
            "lowerdir" | "lowerdir+" | "datadir+" => {
                let mut dirs = Vec::new();
                let mut cur = String::new();
                let mut chars = value.chars();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => cur.extend(chars.next()),
                        ':' => dirs.push(std::mem::take(&mut cur)),
                        c => cur.push(c),
                    }
                }
                dirs.push(cur);
                dirs
            }
            "upperdir" => vec![value],
            _ => continue,
        };
        for d in dirs {
            if d.starts_with('/') && !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// udev's `\xHH` escapes in disk/by-label names.
fn unescape_hex(s: &str) -> String {
    unescape(s, b"\\x", 2, 16)
}

/// A LUKS UUID from dm/uuid's 32 hex digits, with dashes.
fn dashed(hex: &str) -> Option<String> {
    if hex.len() != 32 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    Some(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// `VG-LV` as dm names LVs: a `-` inside a name is doubled.
pub fn split_lvm_name(name: &str) -> (String, String) {
    let b = name.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'-' {
            if b.get(i + 1) == Some(&b'-') {
                i += 2;
                continue;
            }
            return (
                name[..i].replace("--", "-"),
                name[i + 1..].replace("--", "-"),
            );
        }
        i += 1;
    }
    (name.replace("--", "-"), String::new())
}

struct Reader<'a> {
    root: PathBuf,
    src: Sources<'a>,
    stack: Stack,
    memo: HashMap<PathBuf, LayerId>,
    visiting: HashSet<PathBuf>,
    visits: usize,
    /// Filesystems below others (an overlay's layers, a loop device's
    /// backing file's) by mount point, and those being read.
    mounts: HashMap<String, LayerId>,
    mounting: HashSet<String>,
    /// disk/by-X links: kernel name -> value, read once each.
    by: HashMap<&'static str, HashMap<String, String>>,
}

impl<'a> Reader<'a> {
    fn note(&mut self, m: String) {
        if !self.stack.notes.contains(&m) {
            self.stack.notes.push(m);
        }
    }

    /// `p` with every link resolved, if that stays inside sysfs.
    fn inside(&self, p: &Path) -> Option<PathBuf> {
        let c = std::fs::canonicalize(p).ok()?;
        c.starts_with(&self.root).then_some(c)
    }

    fn attr_bytes(&self, dir: &Path, rel: &str) -> Option<Vec<u8>> {
        let p = self.inside(&dir.join(rel))?;
        superblock::read_bounded(&p, MAX_ATTR)
    }

    /// A text attribute, trimmed; None when missing, empty or outside sysfs.
    fn attr(&self, dir: &Path, rel: &str) -> Option<String> {
        let b = self.attr_bytes(dir, rel)?;
        let t = String::from_utf8_lossy(&b)
            .trim_end_matches(['\n', '\0'])
            .trim()
            .to_string();
        (!t.is_empty()).then_some(t)
    }

    fn is_dir(&self, p: &Path) -> bool {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
    }

    /// A directory's entry names, sorted, at most MAX_ENTRIES.
    fn entries(&mut self, dir: &Path) -> Vec<String> {
        if !self.is_dir(dir) {
            return Vec::new();
        }
        let Ok(rd) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut out: Vec<String> = Vec::new();
        for e in rd.flatten() {
            if out.len() >= MAX_ENTRIES {
                self.note(format!(
                    "{}: more than {MAX_ENTRIES} entries, the rest left out",
                    dir.display()
                ));
                break;
            }
            out.push(e.file_name().to_string_lossy().into_owned());
        }
        out.sort();
        out
    }

    /// The value udev's `dev/disk/by-X` gives the device `kname`.
    fn by(&mut self, kind: &'static str, kname: &str) -> Option<String> {
        let dev = self.src.dev?;
        if !self.by.contains_key(kind) {
            let dir = dev.join("disk").join(kind);
            let mut map = HashMap::new();
            for name in self.entries(&dir) {
                if let Ok(t) = std::fs::read_link(dir.join(&name)) {
                    if let Some(k) = t.file_name() {
                        map.entry(k.to_string_lossy().into_owned())
                            .or_insert_with(|| unescape_hex(&name));
                    }
                }
            }
            self.by.insert(kind, map);
        }
        self.by[kind].get(kname).cloned()
    }

    /// Devices with a modalias from `dir` up to sys/devices.
    fn bus_chain(&self, dir: &Path) -> Vec<BusDevice> {
        let top = self.root.join("devices");
        let mut out = Vec::new();
        let mut at = Some(dir);
        while let Some(d) = at.filter(|d| d.starts_with(&top)) {
            if let Some(alias) = self.attr(d, "modalias") {
                out.push(BusDevice {
                    path: d.to_path_buf(),
                    modalias: alias,
                });
            }
            at = d.parent();
        }
        out
    }

    /// The server of the disk `name` at `path`: an iSCSI LUN is below
    /// its session's directory (`.../hostH/sessionN/targetH:C:T/H:C:T:L/
    /// block/sdX`), whose `iscsi_session/sessionN/targetname` names the
    /// target and whose `connectionN:0` the portal; an NBD device is
    /// `nbdN` with a `pid` or `backend` attribute, or under
    /// `devices/virtual/block`.
    fn remote(&self, path: &Path, name: &str) -> Option<Remote> {
        let top = self.root.join("devices");
        let mut lun = None;
        let mut at = path.parent();
        while let Some(d) = at.filter(|d| d.starts_with(&top) && *d != top) {
            let base = d.file_name()?.to_string_lossy().into_owned();
            if lun.is_none() && base.split(':').count() == 4 {
                lun = base.rsplit(':').next().map(str::to_string);
            }
            if let Some(n) = base
                .strip_prefix("session")
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            {
                let target = self.attr(d, &format!("iscsi_session/{base}/targetname"))?;
                let conn = format!("connection{n}:0/iscsi_connection/connection{n}:0");
                return Some(Remote::Iscsi {
                    target,
                    address: self.attr(d, &format!("{conn}/persistent_address")),
                    port: self.attr(d, &format!("{conn}/persistent_port")),
                    lun: lun.unwrap_or_else(|| "0".into()),
                });
            }
            at = d.parent();
        }
        let nbd = name
            .strip_prefix("nbd")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        (nbd && (self.attr(path, "pid").is_some()
            || self.attr(path, "backend").is_some()
            || path.starts_with(self.root.join("devices/virtual/block"))))
        .then_some(Remote::Nbd)
    }

    /// The layer of the block device at `path` (canonical, inside sysfs)
    /// and everything below it.
    fn block(&mut self, path: &Path, depth: usize) -> Option<LayerId> {
        if let Some(&id) = self.memo.get(path) {
            return Some(id);
        }
        if self.visiting.contains(path) {
            self.note(format!(
                "{}: a cycle in sysfs, not followed again",
                path.display()
            ));
            return None;
        }
        if depth > MAX_DEPTH {
            self.note(format!(
                "{}: deeper than {MAX_DEPTH} layers, not followed",
                path.display()
            ));
            return None;
        }
        if self.visits >= MAX_NODES {
            self.note(format!(
                "more than {MAX_NODES} block devices under the mounts, the rest left out"
            ));
            return None;
        }
        self.visits += 1;
        self.visiting.insert(path.to_path_buf());
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dev = self.attr(path, "dev").unwrap_or_default();
        let partition = self.attr(path, "partition");
        let mut below = Vec::new();
        let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
        if partition.is_some() {
            // A partition's disk is its parent directory.
            if self.attr(&parent, "dev").is_some() {
                below.extend(self.block(&parent, depth + 1));
            }
        } else {
            let slaves = path.join("slaves");
            for s in self.entries(&slaves) {
                match self.inside(&slaves.join(&s)) {
                    Some(c) => below.extend(self.block(&c, depth + 1)),
                    None => self.note(format!(
                        "{}: a link out of sysfs, not followed",
                        slaves.join(&s).display()
                    )),
                }
            }
        }
        let kind = if let Some(n) = partition {
            Kind::Partition(Partition {
                disk: parent
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                number: n.parse().unwrap_or(0),
                partuuid: self
                    .attr(path, "uevent")
                    .and_then(|u| {
                        u.lines()
                            .find_map(|l| l.strip_prefix("PARTUUID=").map(str::to_string))
                    })
                    .or_else(|| self.by("by-partuuid", &name)),
                name: name.clone(),
            })
        } else if self.is_dir(&path.join("dm")) {
            self.dm(path, &name, &below)
        } else if self.is_dir(&path.join("md")) {
            self.md(path, &name, &below)
        } else if name.starts_with("loop") && self.is_dir(&path.join("loop")) {
            let backing_file = self.attr(path, "loop/backing_file");
            // The file's filesystem (a live medium under its image).
            if let Some(file) = &backing_file {
                below.extend(self.holding(file, &format!("{name}'s file {file}"), depth + 1));
            }
            Kind::Loop(Loop {
                name: name.clone(),
                backing_file,
            })
        } else {
            Kind::Disk(Disk {
                name: name.clone(),
                devices: self.bus_chain(path),
                remote: self.remote(path, &name),
            })
        };
        self.visiting.remove(path);
        let id = self.stack.layers.len();
        self.stack.layers.push(Layer {
            kind,
            sys: Some(path.to_path_buf()),
            dev,
            below,
        });
        self.memo.insert(path.to_path_buf(), id);
        Some(id)
    }

    fn lv_kind_of(&self, id: LayerId) -> Option<&LvKind> {
        match &self.stack.layers.get(id)?.kind {
            Kind::Lvm(l) => Some(&l.kind),
            _ => None,
        }
    }

    fn dm(&mut self, path: &Path, kname: &str, below: &[LayerId]) -> Kind {
        let uuid = self.attr(path, "dm/uuid").unwrap_or_default();
        let name = self
            .attr(path, "dm/name")
            .unwrap_or_else(|| kname.to_string());
        if uuid.starts_with("CRYPT-VERITY-") {
            return Kind::Verity(Verity { name });
        }
        if let Some(rest) = uuid.strip_prefix("CRYPT-") {
            let (ty, rest) = rest.split_once('-').unwrap_or((rest, ""));
            let kind = match ty {
                "LUKS1" => CryptKind::Luks1,
                "LUKS2" => CryptKind::Luks2,
                "PLAIN" => CryptKind::Plain,
                other => CryptKind::Other(other.to_string()),
            };
            let luks_uuid = matches!(kind, CryptKind::Luks1 | CryptKind::Luks2)
                .then(|| dashed(rest.get(..32)?))
                .flatten();
            // The ciphers, from the LUKS header of the device below.
            let header = match (&kind, self.src.dev, below.first()) {
                (CryptKind::Luks1 | CryptKind::Luks2, Some(dev), Some(&b)) => self
                    .node_of(dev, b)
                    .map(|(node, _)| super::luks::read_header(&node))
                    .unwrap_or_default(),
                _ => Default::default(),
            };
            return Kind::Crypt(Crypt {
                name,
                kind,
                luks_uuid,
                crypttab: None,
                ciphers: header.ciphers,
                tpm2_token: header.tpm2,
                clevis_token: header.clevis,
            });
        }
        if let Some(rest) = uuid.strip_prefix("LVM-") {
            let (ids, suffix) = match rest.split_once('-') {
                Some((a, b)) => (a, Some(b)),
                None => (rest, None),
            };
            let (vg, lv) = split_lvm_name(&name);
            let kind = match suffix {
                Some("tpool") => LvKind::ThinPool,
                Some("tdata") => LvKind::ThinPoolData,
                Some("tmeta") => LvKind::ThinPoolMeta,
                Some("real") => LvKind::SnapshotOrigin,
                Some("cow") => LvKind::SnapshotCow,
                Some(s) => LvKind::Other(s.to_string()),
                None if below
                    .iter()
                    .any(|&b| self.lv_kind_of(b) == Some(&LvKind::ThinPool)) =>
                {
                    LvKind::Thin
                }
                None if below
                    .iter()
                    .any(|&b| self.lv_kind_of(b) == Some(&LvKind::SnapshotOrigin)) =>
                {
                    LvKind::Snapshot
                }
                None if below.iter().any(|&b| {
                    matches!(&self.stack.layers[b].kind, Kind::Lvm(l) if l.lv.contains("_rimage_"))
                }) =>
                {
                    LvKind::Raid
                }
                None => LvKind::Linear,
            };
            return Kind::Lvm(Lvm {
                vg,
                lv,
                kind,
                vg_uuid: ids.get(..32).unwrap_or("").to_string(),
                lv_uuid: ids.get(32..).unwrap_or("").to_string(),
            });
        }
        if let Some(wwid) = uuid.strip_prefix("mpath-") {
            return Kind::Multipath(Multipath {
                name,
                wwid: wwid.to_string(),
            });
        }
        // kpartx's partitions of a multipath map: `partN-mpath-...`.
        if let Some(rest) = uuid.strip_prefix("part") {
            if let Some((n, _)) = rest.split_once('-') {
                if let (Ok(number), Some(&d)) = (n.parse(), below.first()) {
                    return Kind::Partition(Partition {
                        name,
                        disk: self.stack.layers[d].kind.name().to_string(),
                        number,
                        partuuid: None,
                    });
                }
            }
        }
        Kind::Mapper(Mapper { name, uuid })
    }

    /// The device node of layer `id` under the `dev` directory, and its
    /// size in bytes; None when its kernel name could leave `dev`.
    fn node_of(&mut self, dev: &Path, id: LayerId) -> Option<(PathBuf, u64)> {
        let l = &self.stack.layers[id];
        let sys = l.sys.clone()?;
        let kname = l.kind.name().replace('!', "/");
        if kname
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return None;
        }
        let size = self
            .attr(&sys, "size")
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
            .saturating_mul(512);
        Some((dev.join(kname), size))
    }

    fn md(&mut self, path: &Path, name: &str, below: &[LayerId]) -> Kind {
        let metadata = self.attr(path, "md/metadata_version").unwrap_or_default();
        let mut uuid = self
            .attr(path, "md/uuid")
            .and_then(|t| superblock::uuid_from_sysfs(&t, &metadata));
        let mut array_name = None;
        // The superblock image sysfs keeps of each member.
        let mdir = path.join("md");
        for e in self.entries(&mdir) {
            if !e.starts_with("dev-") {
                continue;
            }
            if let Some(sb) = self
                .attr_bytes(&mdir, &format!("{e}/super"))
                .and_then(|b| superblock::parse(&b, &metadata))
            {
                uuid.get_or_insert(sb.uuid);
                array_name = sb.name;
                break;
            }
        }
        // The members themselves.
        if uuid.is_none() {
            if let Some(dev) = self.src.dev {
                for &m in below {
                    let Some((node, size)) = self.node_of(dev, m) else {
                        continue;
                    };
                    if let Some(sb) = superblock::read_member(&node, &metadata, size) {
                        uuid = Some(sb.uuid);
                        array_name = sb.name;
                        break;
                    }
                }
            }
        }
        if uuid.is_none() {
            self.note(format!(
                "md array {name}: no UUID in sysfs or the members' superblocks"
            ));
        }
        Kind::Md(Md {
            name: name.to_string(),
            level: self.attr(path, "md/level").unwrap_or_default(),
            metadata,
            uuid,
            array_name,
        })
    }

    /// A btrfs filesystem's fsid and devices in sys/fs/btrfs, found by the
    /// mount's source (`/dev/vda2`, `/dev/mapper/NAME`).
    fn btrfs(&mut self, source: &str) -> Option<(String, Vec<PathBuf>)> {
        let base = source.rsplit('/').next().unwrap_or(source).to_string();
        let top = self.root.join("fs/btrfs");
        for fsid in self.entries(&top) {
            let dir = top.join(&fsid).join("devices");
            let mut devs = Vec::new();
            let mut ours = false;
            for d in self.entries(&dir) {
                let Some(c) = self.inside(&dir.join(&d)) else {
                    continue;
                };
                ours |= d == base || self.attr(&c, "dm/name").as_deref() == Some(&base);
                devs.push(c);
            }
            if ours {
                return Some((fsid, devs));
            }
        }
        None
    }

    /// The layer of the filesystem holding `path` (an overlay's directory, a
    /// loop device's file) and what is below it, read once per mount point;
    /// None, with a note naming `what`, when no mount holds it, when that is
    /// a filesystem being read (a cycle), or too deep.
    fn holding(&mut self, path: &str, what: &str, depth: usize) -> Option<LayerId> {
        if !path.starts_with('/') {
            self.note(format!("{what}: not an absolute path, not followed"));
            return None;
        }
        let m = mount_holding(self.src.mountinfo, path)
            .and_then(|mp| mount_of(self.src.mountinfo, &mp));
        let Some(m) = m else {
            self.note(format!("{what}: no mount holds it, not followed"));
            return None;
        };
        if let Some(&id) = self.mounts.get(&m.mountpoint) {
            return Some(id);
        }
        if self.mounting.contains(&m.mountpoint) {
            self.note(format!(
                "{what}: on {}, which is being followed (a cycle), not followed again",
                m.mountpoint
            ));
            return None;
        }
        if depth > MAX_DEPTH || self.visits >= MAX_NODES {
            self.note(format!(
                "{what}: deeper than {MAX_DEPTH} layers, not followed"
            ));
            return None;
        }
        self.visits += 1;
        match self.mount(&m, depth) {
            Ok(id) => {
                self.mounts.insert(m.mountpoint.clone(), id);
                Some(id)
            }
            Err(e) => {
                self.note(format!("{what}: {e}"));
                None
            }
        }
    }

    fn mount(&mut self, m: &Mount, depth: usize) -> Result<LayerId, StackError> {
        let sys = self.root.display().to_string();
        let no_block = || StackError::NoBlockDevice {
            mountpoint: m.mountpoint.clone(),
            fstype: m.fstype.clone(),
            from: m.source.clone(),
            device: m.device.clone(),
            sys: sys.clone(),
        };
        let mut fs = Filesystem {
            fstype: m.fstype.clone(),
            device: m.device.clone(),
            source: m.source.clone(),
            mountpoint: m.mountpoint.clone(),
            uuid: None,
            label: None,
        };
        let mut devices = Vec::new();
        if m.fstype == "btrfs" {
            if let Some((fsid, devs)) = self.btrfs(&m.source) {
                // The label of a btrfs over several devices: udev's by-label link
                // names one of them only.
                fs.label = self.attr(&self.root.join("fs/btrfs").join(&fsid), "label");
                fs.uuid = Some(fsid);
                devices = devs;
            }
        }
        if devices.is_empty() {
            let by_dev = self.inside(&self.root.join("dev/block").join(&m.device));
            let by_name = m
                .source
                .strip_prefix("/dev/")
                .filter(|n| !n.contains('/') && !n.starts_with('.'))
                .and_then(|n| self.inside(&self.root.join("class/block").join(n)));
            devices.extend(by_dev.or(by_name));
        }
        let mut below = Vec::new();
        self.mounting.insert(m.mountpoint.clone());
        if m.fstype == "overlay" {
            // An overlay is its layers' filesystems: a live root's image and
            // the tmpfs or device its changes go to.
            for dir in overlay_dirs(&m.options) {
                let what = format!("the overlay on {}: its layer {dir}", m.mountpoint);
                if let Some(id) = self.holding(&dir, &what, depth + 1) {
                    if !below.contains(&id) {
                        below.push(id);
                    }
                }
            }
        } else {
            for d in &devices {
                below.extend(self.block(d, depth + 1));
            }
        }
        self.mounting.remove(&m.mountpoint);
        // A filesystem over the network or in memory has no block device:
        // its layer is the whole stack (what an NFS root needs is the
        // network, see `needs`).
        if below.is_empty() && !is_network_fs(&m.fstype) && !is_memory_fs(&m.fstype) {
            return Err(no_block());
        }
        let on_device = below
            .first()
            .is_some_and(|&b| !matches!(self.stack.layers[b].kind, Kind::Filesystem(_)));
        if fs.uuid.is_none() && below.len() == 1 && on_device {
            let k = self.stack.layers[below[0]].kind.name().to_string();
            fs.uuid = self.by("by-uuid", &k);
            fs.label = self.by("by-label", &k);
        }
        let id = self.stack.layers.len();
        self.stack.layers.push(Layer {
            kind: Kind::Filesystem(fs),
            sys: None,
            dev: m.device.clone(),
            below,
        });
        Ok(id)
    }

    /// Which crypttab line names each crypt layer: its name, or its device
    /// (`UUID=`, `PARTUUID=`, a /dev path of the layer below).
    fn match_crypttab(&mut self) {
        for i in 0..self.stack.layers.len() {
            let Kind::Crypt(c) = &self.stack.layers[i].kind else {
                continue;
            };
            let under: Vec<(String, Option<String>)> = self.stack.layers[i]
                .below
                .iter()
                .map(|&b| match &self.stack.layers[b].kind {
                    Kind::Partition(p) => (p.name.clone(), p.partuuid.clone()),
                    k => (k.name().to_string(), None),
                })
                .collect();
            let uuid = c.luks_uuid.clone().unwrap_or_default();
            let eq = |a: &str, b: &str| !a.is_empty() && a.eq_ignore_ascii_case(b);
            let names_device = |d: &DeviceSpec| match d {
                DeviceSpec::Uuid(u) => eq(u, &uuid),
                DeviceSpec::PartUuid(p) => under
                    .iter()
                    .any(|(_, pu)| pu.as_deref().is_some_and(|pu| eq(p, pu))),
                DeviceSpec::Path(p) => {
                    p.strip_prefix("/dev/disk/by-uuid/")
                        .is_some_and(|u| eq(u, &uuid))
                        || p.strip_prefix("/dev/disk/by-partuuid/").is_some_and(|p| {
                            under
                                .iter()
                                .any(|(_, pu)| pu.as_deref().is_some_and(|pu| eq(p, pu)))
                        })
                        || p.strip_prefix("/dev/")
                            .is_some_and(|k| under.iter().any(|(n, _)| eq(k, n)))
                }
                DeviceSpec::Label(_) | DeviceSpec::PartLabel(_) => false,
            };
            let found = self
                .stack
                .crypttab
                .iter()
                .position(|e| e.name == c.name)
                .or_else(|| {
                    self.stack
                        .crypttab
                        .iter()
                        .position(|e| names_device(&e.device))
                });
            if let Kind::Crypt(c) = &mut self.stack.layers[i].kind {
                c.crypttab = found;
            }
        }
    }
}

/// Reads the stack under `mountpoints` (normally `/` and `/usr`): the
/// first must be mounted on a block device; a later one that is not a
/// mount of its own is left out.
pub fn read(src: &Sources, mountpoints: &[&str]) -> Result<Stack, StackError> {
    let root = std::fs::canonicalize(src.sys)
        .map_err(|e| StackError::Sys(src.sys.display().to_string(), e))?;
    let (entries, bad) = crypttab::parse(src.crypttab);
    let mut r = Reader {
        root,
        src: *src,
        stack: Stack {
            crypttab: entries,
            notes: bad,
            ..Stack::default()
        },
        memo: HashMap::new(),
        visiting: HashSet::new(),
        visits: 0,
        mounts: HashMap::new(),
        mounting: HashSet::new(),
        by: HashMap::new(),
    };
    for (i, mp) in mountpoints.iter().enumerate() {
        let Some(m) = mount_of(src.mountinfo, mp) else {
            if i == 0 {
                return Err(StackError::NoMount(mp.to_string()));
            }
            continue;
        };
        match r.mount(&m, 0) {
            Ok(id) => {
                r.mounts.insert(m.mountpoint.clone(), id);
                r.stack.tops.push(id);
            }
            Err(e) if i == 0 => return Err(e),
            Err(e) => r.note(e.to_string()),
        }
    }
    r.match_crypttab();
    Ok(r.stack)
}

//! The running machine: the modaliases of its devices (what udev hands to
//! `modprobe -b`) and the modules it has loaded (`/proc/modules`).

use std::path::{Path, PathBuf};

/// One device that names the driver it wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostDevice {
    /// The device's directory in sysfs.
    pub path: PathBuf,
    pub modalias: String,
}

/// What host mode found.
#[derive(Clone, Debug, Default)]
pub struct HostScan {
    /// Devices in path order; a modalias seen before is not repeated.
    pub devices: Vec<HostDevice>,
    /// Module names from `/proc/modules`, in its order.
    pub loaded: Vec<String>,
    /// False when `/proc/modules` does not exist (a kernel without
    /// loadable modules).
    pub proc_modules: bool,
}

/// Reads every `modalias` file below `devices` (normally `/sys/devices`),
/// without following symlinks.
pub fn modaliases(devices: &Path) -> std::io::Result<Vec<HostDevice>> {
    let mut out: Vec<HostDevice> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let walker = walkdir::WalkDir::new(devices)
        .follow_links(false)
        .sort_by(|a, b| a.file_name().cmp(b.file_name()));
    for e in walker.into_iter().filter_map(|e| e.ok()) {
        if e.file_name() != "modalias" || !e.file_type().is_file() {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let alias = text.trim_end_matches(['\n', '\0']).trim();
        if alias.is_empty() || !seen.insert(alias.to_string()) {
            continue;
        }
        let dir = e.path().parent().unwrap_or(devices).to_path_buf();
        out.push(HostDevice {
            path: dir,
            modalias: alias.to_string(),
        });
    }
    if out.is_empty() && !devices.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} is not a directory", devices.display()),
        ));
    }
    Ok(out)
}

/// Module names in a `/proc/modules` text.
pub fn parse_proc_modules(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(super::names::normalize_modname)
        .collect()
}

/// Scans `sys_devices` and `proc_modules` (normally `/sys/devices` and
/// `/proc/modules`).
pub fn scan(sys_devices: &Path, proc_modules: &Path) -> std::io::Result<HostScan> {
    let devices = modaliases(sys_devices)?;
    let (loaded, present) = match std::fs::read_to_string(proc_modules) {
        Ok(t) => (parse_proc_modules(&t), true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), false),
        Err(e) => return Err(e),
    };
    Ok(HostScan {
        devices,
        loaded,
        proc_modules: present,
    })
}

/// What the running machine needs to reach its root filesystem.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RootStack {
    /// The root's `major:minor` and filesystem type, from mountinfo.
    pub device: String,
    pub fstype: String,
    /// The block devices on the way (the root's, its disk, slaves), in sysfs.
    pub blocks: Vec<PathBuf>,
    /// Every device with a modalias from those block devices up to the
    /// bus, and the machine's keyboards and their controllers.
    pub devices: Vec<HostDevice>,
    /// Module names the stack needs whatever devices say: `fs-TYPE`, and
    /// device-mapper and md targets (`dm-crypt`, `raid1`), with why.
    pub names: Vec<(String, String)>,
}

/// The root filesystem's `major:minor` and type in a mountinfo text (the
/// last mount on `/`).
pub fn root_of(mountinfo: &str) -> Option<(String, String)> {
    mountinfo.lines().rev().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split_whitespace().collect();
        (f.get(4) == Some(&"/")).then(|| {
            let fstype = right.split_whitespace().next().unwrap_or("").to_string();
            (f.get(2).copied().unwrap_or("").to_string(), fstype)
        })
    })
}

/// Devices with a modalias from `dir` up to `top` (not above it).
fn ancestors(
    dir: &Path,
    top: &Path,
    out: &mut Vec<HostDevice>,
    seen: &mut std::collections::HashSet<String>,
) {
    let mut at = Some(dir);
    while let Some(d) = at {
        if !d.starts_with(top) {
            break;
        }
        if let Ok(text) = std::fs::read_to_string(d.join("modalias")) {
            let alias = text.trim_end_matches(['\n', '\0']).trim().to_string();
            if !alias.is_empty() && seen.insert(alias.clone()) {
                out.push(HostDevice {
                    path: d.to_path_buf(),
                    modalias: alias,
                });
            }
        }
        at = d.parent();
    }
}

/// The root's stack, read from `sys` (normally `/sys`) and a mountinfo
/// text (normally `/proc/self/mountinfo`).
pub fn root_stack(sys: &Path, mountinfo: &str) -> std::io::Result<RootStack> {
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::NotFound, m);
    let (device, fstype) =
        root_of(mountinfo).ok_or_else(|| bad("no mount on / in mountinfo".into()))?;
    let mut stack = RootStack {
        names: vec![(format!("fs-{fstype}"), format!("root filesystem {fstype}"))],
        device: device.clone(),
        fstype,
        ..RootStack::default()
    };
    let top = sys.join("devices");
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![std::fs::canonicalize(sys.join("dev/block").join(&device))
        .map_err(|e| bad(format!("the root's block device {device} in sysfs: {e}")))?];
    let mut visited = std::collections::HashSet::new();
    while let Some(b) = todo.pop() {
        if !visited.insert(b.clone()) || visited.len() > 256 {
            continue;
        }
        stack.blocks.push(b.clone());
        ancestors(&b, &top, &mut stack.devices, &mut seen);
        let name = b
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        // A partition's slaves are its disk's: look at both.
        for dir in [
            b.clone(),
            b.parent().map(Path::to_path_buf).unwrap_or_default(),
        ] {
            if let Ok(rd) = std::fs::read_dir(dir.join("slaves")) {
                for e in rd.flatten() {
                    if let Ok(p) = std::fs::canonicalize(e.path()) {
                        todo.push(p);
                    }
                }
            }
        }
        if let Ok(uuid) = std::fs::read_to_string(b.join("dm/uuid")) {
            let target = match uuid.split('-').next().unwrap_or("") {
                "CRYPT" => Some("dm-crypt"),
                "mpath" => Some("dm-multipath"),
                "LVM" | "part" => Some("dm-mod"),
                _ => Some("dm-mod"),
            };
            if let Some(t) = target {
                stack
                    .names
                    .push((t.to_string(), format!("device-mapper device {name}")));
            }
        }
        if let Ok(level) = std::fs::read_to_string(b.join("md/level")) {
            let level = level.trim();
            let module = match level {
                "raid4" | "raid5" | "raid6" => "raid456".to_string(),
                l => l.to_string(),
            };
            stack
                .names
                .push((module, format!("md array {name} ({level})")));
        }
        if name.starts_with("loop") {
            stack
                .names
                .push(("loop".into(), format!("loop device {name}")));
        }
    }
    // Keyboards (and what they hang off) for an emergency shell.
    if let Ok(rd) = std::fs::read_dir(sys.join("class/input")) {
        let mut inputs: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("input"))
            .filter_map(|e| std::fs::canonicalize(e.path()).ok())
            .collect();
        inputs.sort();
        for i in inputs {
            let keyboard = std::fs::read_to_string(i.join("capabilities/ev"))
                .ok()
                .and_then(|ev| u64::from_str_radix(ev.trim(), 16).ok())
                .is_some_and(|ev| ev & 0x2 != 0 && ev & 0x100000 != 0);
            if keyboard {
                ancestors(&i, &top, &mut stack.devices, &mut seen);
            }
        }
    }
    Ok(stack)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_mount_of_mountinfo() {
        let m = "22 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw\n\
                 23 22 0:21 / /proc rw - proc proc rw\n\
                 30 22 254:1 / / rw - xfs /dev/mapper/root rw\n";
        assert_eq!(root_of(m), Some(("254:1".into(), "xfs".into())));
        assert_eq!(root_of("23 22 0:21 / /proc rw - proc proc rw\n"), None);
    }

    #[test]
    fn finds_modaliases_once() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("pci0000:00/0000:00:02.0");
        std::fs::create_dir_all(a.join("virtio1")).unwrap();
        std::fs::write(
            a.join("modalias"),
            "pci:v00001AF4d00001042sv00001AF4sd00001042bc01sc80i00\n",
        )
        .unwrap();
        std::fs::write(a.join("virtio1/modalias"), "virtio:d00000002v00001AF4\n").unwrap();
        let b = d.path().join("pci0000:00/0000:00:03.0");
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(b.join("modalias"), "virtio:d00000002v00001AF4\n").unwrap();
        let found = modaliases(d.path()).unwrap();
        let aliases: Vec<&str> = found.iter().map(|h| h.modalias.as_str()).collect();
        assert_eq!(
            aliases,
            [
                "pci:v00001AF4d00001042sv00001AF4sd00001042bc01sc80i00",
                "virtio:d00000002v00001AF4"
            ]
        );
        assert_eq!(found[1].path, a.join("virtio1"));
        let proc = d.path().join("modules");
        std::fs::write(
            &proc,
            "virtio_blk 20480 2 - Live 0x0\ncrc32c-intel 24576 1 - Live 0x0\n",
        )
        .unwrap();
        let s = scan(d.path(), &proc).unwrap();
        assert_eq!(s.loaded, ["virtio_blk", "crc32c_intel"]);
        assert!(s.proc_modules);
        assert!(
            !scan(d.path(), &d.path().join("absent"))
                .unwrap()
                .proc_modules
        );
    }
}

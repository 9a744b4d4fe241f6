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

/// The machine's keyboards and the devices with a modalias they hang off,
/// from `sys` (normally `/sys`): what an emergency shell needs to be typed in.
pub fn keyboards(sys: &Path) -> Vec<HostDevice> {
    let top = sys.join("devices");
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    if let Ok(rd) = std::fs::read_dir(sys.join("class/input")) {
        let mut inputs: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("input"))
            .filter_map(|e| std::fs::canonicalize(e.path()).ok())
            .collect();
        inputs.sort();
        for i in inputs {
            // EV_KEY and EV_REP: a keyboard.
            let keyboard = std::fs::read_to_string(i.join("capabilities/ev"))
                .ok()
                .and_then(|ev| u64::from_str_radix(ev.trim(), 16).ok())
                .is_some_and(|ev| ev & 0x2 != 0 && ev & 0x100000 != 0);
            if keyboard {
                ancestors(&i, &top, &mut out, &mut seen);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn keyboards_and_what_they_hang_off() {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path();
        let usb = sys.join("devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0");
        for (dir, ev, alias) in [
            (
                "input/input3",
                "120013",
                "usb:v046Dp4016d0101dc00dsc00dp00ic03isc01ip01in00",
            ),
            (
                "input/input4",
                "7",
                "usb:v046Dp4017d0101dc00dsc00dp00ic03isc01ip02in00",
            ),
        ] {
            let i = usb.join(dir);
            std::fs::create_dir_all(i.join("capabilities")).unwrap();
            std::fs::write(i.join("capabilities/ev"), format!("{ev}\n")).unwrap();
            std::fs::write(i.join("modalias"), "input:b0003v046D\n").unwrap();
            std::fs::write(usb.join("modalias"), format!("{alias}\n")).unwrap();
            std::fs::create_dir_all(sys.join("class/input")).unwrap();
            let name = dir.rsplit('/').next().unwrap();
            std::os::unix::fs::symlink(&i, sys.join("class/input").join(name)).unwrap();
        }
        std::fs::write(
            sys.join("devices/pci0000:00/0000:00:14.0/modalias"),
            "pci:v00008086d0000A36Dsv00001028sd0000085Cbc0Csc03i30\n",
        )
        .unwrap();
        // input3 has EV_KEY and EV_REP (a keyboard); input4 (a mouse) does not.
        let k = keyboards(sys);
        let aliases: Vec<&str> = k.iter().map(|h| h.modalias.as_str()).collect();
        assert_eq!(
            aliases,
            [
                "input:b0003v046D",
                "usb:v046Dp4017d0101dc00dsc00dp00ic03isc01ip02in00",
                "pci:v00008086d0000A36Dsv00001028sd0000085Cbc0Csc03i30"
            ]
        );
        assert_eq!(k[0].path, usb.join("input/input3"));
        assert!(keyboards(&sys.join("absent")).is_empty());
    }
}

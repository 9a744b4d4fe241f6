//! Roots of the Debian releases people run: Debian 13 (trixie, the stable release and
//! the boot tests' platform: its kernel boots every boot test's image, and the generic
//! images take its programs), Debian unstable (sid) and Debian 12 (bookworm), each
//! with its own kernel, systemd, udev, kmod, cryptsetup and busybox, made once with
//! `mmdebstrap --variant=apt` from this machine's apt sources (the suite renamed) and
//! kept in the asset cache, keyed by suite and month. Each root comes with an ext4 disk
//! of it whose systemd prints a marker (the token, the release's codename, the kernel
//! that runs and what PID 1 is) and powers off.
//!
//! The roots are as `mmdebstrap --variant=apt` makes them: no systemd-sysv (so no
//! /sbin/init: the switch goes to the root's systemd, as systemd itself does), no
//! recommended packages, and no initramfs-tools image of their kernel (`INITRD=No`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{cached_asset, require_root, require_tool, try_run, DebianKernel};

/// A release this machine can make a root of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Debian 12, the release before: systemd 252, kernel 6.1.
    Bookworm,
    /// Debian 13, the stable release: systemd 257, kernel 6.12. The boot tests' platform.
    Trixie,
    /// Debian unstable: systemd 262, kernel 7.x.
    Sid,
}

impl Release {
    pub fn suite(self) -> &'static str {
        match self {
            Release::Bookworm => "bookworm",
            Release::Trixie => "trixie",
            Release::Sid => "sid",
        }
    }

    /// The suites of its apt source.
    fn suites(self) -> &'static str {
        match self {
            Release::Bookworm => "bookworm bookworm-updates",
            Release::Trixie => "trixie trixie-updates",
            Release::Sid => "unstable",
        }
    }

    /// The packages of its root: [`PACKAGES`] (systemd-cryptsetup is a package of its
    /// own from Debian 13 on), and for the platform what the boot matrix's images take
    /// from it.
    fn packages(self) -> String {
        match self {
            Release::Bookworm => PACKAGES.to_string(),
            Release::Trixie => format!("{PACKAGES},systemd-cryptsetup,{PLATFORM_PACKAGES}"),
            Release::Sid => format!("{PACKAGES},systemd-cryptsetup"),
        }
    }

    /// The name of its asset (a root is made again each month, and when what it holds
    /// changes).
    fn asset(self) -> String {
        format!("release-root-{}-{}-v3", self.suite(), month())
    }
}

/// The packages every release root has.
pub const PACKAGES: &str = "linux-image-amd64,systemd,udev,kmod,cryptsetup,\
     busybox,e2fsprogs,util-linux,systemd-boot-efi";

/// What the boot matrix's images take from the platform's root beyond [`PACKAGES`]:
/// the storage stack's tools (LVM with thin pools, md, btrfs, xfs), the console's
/// keymap and font, the network roots' clients (NBD, iSCSI, NFS), clevis for Tang, the
/// tpm2-tss libraries systemd-cryptsetup loads (and systemd-measure, on swtpm's socket),
/// and dropbear for unlocking over SSH.
pub const PLATFORM_PACKAGES: &str = "lvm2,mdadm,thin-provisioning-tools,btrfs-progs,\
     xfsprogs,kbd,console-setup,nbd-client,open-iscsi,nfs-common,iproute2,clevis,\
     clevis-luks,jose,curl,libtss2-esys-3.0.2-0t64,libtss2-rc0t64,libtss2-mu-4.0.1-0t64,\
     libtss2-tcti-device0t64,libtss2-tcti-swtpm0t64,dropbear-bin";

/// The filesystem UUID of every release root's disk.
pub const ROOT_UUID: &str = "7c0e5a1f-2b3d-4e6f-8a9b-13579bdf2468";

/// A release root and its disk.
pub struct ReleaseRoot {
    pub release: Release,
    /// The root, for `--root`.
    pub dir: PathBuf,
    /// An ext4 image of the root (attach it read-only or with `snapshot=on`).
    pub disk: PathBuf,
    /// The release's kernel, from the root's /boot and module tree.
    pub kernel: DebianKernel,
    /// What the root's marker unit prints first.
    pub token: String,
}

impl ReleaseRoot {
    /// The console line that says the root's own systemd came up on its own kernel.
    pub fn marker(&self) -> String {
        format!(
            "COMPOSER-RELEASE-OK {} {} {} pid1=systemd in-initrd=no",
            self.token,
            self.codename(),
            self.kernel.version
        )
    }

    /// The root's VERSION_CODENAME (sid calls itself by the next release's name).
    pub fn codename(&self) -> String {
        let text = fs::read_to_string(self.dir.join("usr/lib/os-release")).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
            .unwrap_or("unknown")
            .trim_matches('"')
            .to_string()
    }

    /// The systemd version of the root, from its shared library's name.
    pub fn systemd_version(&self) -> Option<u32> {
        let dir = self.dir.join("usr/lib/x86_64-linux-gnu/systemd");
        fs::read_dir(dir).ok()?.flatten().find_map(|e| {
            let n = e.file_name().into_string().ok()?;
            n.strip_prefix("libsystemd-shared-")?
                .strip_suffix(".so")?
                .parse()
                .ok()
        })
    }

    /// `composer build --root ROOT --kver VERSION --no-sync`: callers add the manifest
    /// and `-o`.
    pub fn build(&self) -> Command {
        let mut cmd = super::composer();
        cmd.args(["build", "--no-sync", "--kver", &self.kernel.version])
            .arg("--root")
            .arg(&self.dir);
        cmd
    }
}

/// The apt source of `release`: the first stanza of this machine's Debian sources with
/// its suites changed.
pub(crate) fn sources(release: Release) -> Result<String, String> {
    let path = Path::new("/etc/apt/sources.list.d/debian.sources");
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let stanza = text
        .split("\n\n")
        .find(|s| s.lines().any(|l| l.starts_with("URIs:")))
        .ok_or_else(|| format!("{}: no stanza with URIs", path.display()))?;
    Ok(stanza
        .lines()
        .map(|l| {
            if l.starts_with("Suites:") {
                format!("Suites: {}", release.suites())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n")
}

/// The year and month, for the cache key (a root is made again each month).
pub(crate) fn month() -> String {
    let out = Command::new("date").arg("+%Y%m").output();
    out.ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| s.len() == 6)
        .unwrap_or_else(|| "000000".into())
}

/// The root of `release`, made once (about a minute and a half) and shared by the tests.
pub fn release_root(release: Release) -> Option<ReleaseRoot> {
    let mmdebstrap = require_tool("mmdebstrap", "mmdebstrap")?;
    require_tool("mke2fs", "e2fsprogs")?;
    if !require_root() {
        return None;
    }
    let asset = cached_asset(&release.asset(), |tmp| {
        let root = tmp.join("root");
        fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
        let list = tmp.join("release.sources");
        fs::write(&list, sources(release)?).map_err(|e| e.to_string())?;
        try_run(
            Command::new(&mmdebstrap)
                .args(["--variant=apt", "-q"])
                .arg(format!("--include={}", release.packages()))
                // No initramfs-tools image for the root's kernel: the tests build
                // their own, and it would take a minute.
                .env("INITRD", "No")
                // Unstable's Release file may be past its Valid-Until on a mirror's
                // snapshot.
                .arg("--aptopt=Acquire::Check-Valid-Until \"false\"")
                .arg(release.suite())
                .arg(&root)
                .arg(&list),
        )?;
        let token = crate::boot_root::token(release.suite());
        add_marker(&root, &token)?;
        try_run(
            Command::new("mke2fs")
                .args(["-q", "-t", "ext4", "-d"])
                .arg(&root)
                .args(["-U", ROOT_UUID, "-L", "cmp-release"])
                .arg(tmp.join("root.img"))
                .arg("2G"),
        )?;
        fs::write(tmp.join("token"), token).map_err(|e| e.to_string())
    })?;
    let dir = asset.join("root");
    let token = fs::read_to_string(asset.join("token")).ok()?;
    let version = fs::read_dir(dir.join("usr/lib/modules"))
        .ok()?
        .flatten()
        .find_map(|e| e.file_name().into_string().ok())?;
    let kernel = DebianKernel {
        vmlinuz: dir.join("boot").join(format!("vmlinuz-{version}")),
        version,
        root: dir.clone(),
        userland: dir.clone(),
    };
    Some(ReleaseRoot {
        release,
        disk: asset.join("root.img"),
        dir,
        kernel,
        token,
    })
}

/// The unit that prints the marker on the root's console and powers off.
fn add_marker(root: &Path, token: &str) -> Result<(), String> {
    let unit = format!(
        "[Unit]\nDescription=composer test marker\n\n[Service]\nType=oneshot\n\
         ExecStart=/bin/sh -c '. /usr/lib/os-release; echo \"COMPOSER-RELEASE-OK {token} \
         $VERSION_CODENAME $(uname -r) pid1=$(cat /proc/1/comm) \
         in-initrd=$(test -e /etc/initrd-release && echo yes || echo no)\" >/dev/console'\n\
         ExecStartPost=/bin/systemctl --no-block poweroff\n\n[Install]\nWantedBy=multi-user.target\n"
    );
    let sys = root.join("etc/systemd/system");
    let wants = sys.join("multi-user.target.wants");
    fs::create_dir_all(&wants).map_err(|e| e.to_string())?;
    fs::write(sys.join("composer-marker.service"), unit).map_err(|e| e.to_string())?;
    std::os::unix::fs::symlink(
        "../composer-marker.service",
        wants.join("composer-marker.service"),
    )
    .map_err(|e| e.to_string())
}

/// A copy of `root` (hard links: nothing is copied) in `into`, for a test that takes
/// files out of it. Files are only ever removed from it, never written.
pub fn linked_copy(root: &Path, into: &Path) -> PathBuf {
    let copy = into.join("root");
    super::run_ok(Command::new("cp").arg("-al").arg(root).arg(&copy));
    copy
}

/// The boot tests' platform: Debian 13's kernel, whose images take their programs from
/// Debian 13's root ([`DebianKernel::userland`]).
pub fn platform_kernel() -> Option<DebianKernel> {
    release_root(Release::Trixie).map(|r| r.kernel)
}

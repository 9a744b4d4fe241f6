//! Image-based roots, booted with Debian's kernel and the generic image of each init:
//! a squashfs live root on an ISO 9660 medium on a virtio CD-ROM (`root=live:CDLABEL=`,
//! a tmpfs upper layer), the same copied into memory (`rd.live.ram`, the CD then
//! ejected through qemu's monitor while the root reads a file it has not read yet), an
//! erofs image named by `rd.live.squashimg=`, a persistent upper layer
//! (`rd.live.overlay=LABEL=persist:/overlay`, a file written by the first boot read by
//! the second), `overlayroot=tmpfs` over an ext4 disk (its checksum unchanged after a
//! boot that wrote to `/`), and an ext4 root checked by dm-verity (`roothash=` with
//! `systemd.verity_root_data=`/`_hash=` naming two partitions) which boots, and the
//! same disk with one byte of the root's init changed, which must not reach it and
//! ends as `rd.emergency=poweroff` says, naming verity. And (systemd) a boot with no
//! `root=` says that nothing was mounted, not that the root has no init. check-boot's
//! verdict on each (shell) is the boot's: yes for the generic image, no for one
//! without squashfs booting the live medium and one without dm-verity booting the
//! verity root, which are booted too and fail.
//!
//! The media are made once (squashfs-tools, erofs-utils, xorriso, e2fsprogs,
//! cryptsetup-bin's veritysetup on plain files, fdisk's sfdisk) into the test assets.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::{self, BootOptions, DebianKernel, Scratch};

/// The ISO labels and the verity partitions' names.
const LIVE_LABEL: &str = "COMPOSER_LIVE";
const EROFS_LABEL: &str = "COMPOSER_EROFS";

/// The root's init: prints what `/` is, the image under it, what an earlier boot left
/// in `/persist`, the digest of `/data.bin` (read first here: with `rd.live.ram`, after
/// the CD is ejected, which the drive says once it is opened) and the token; writes
/// `/persist`; powers off.
const INIT: &str = r#"#!/bin/busybox sh
b=/bin/busybox
$b mount -t proc proc /proc 2>/dev/null
$b mount -t sysfs sysfs /sys 2>/dev/null
medium=-
if $b grep -q rd.live.ram /proc/cmdline; then
	echo "COMPOSER-EJECT-NOW"
	# The kernel sees the medium gone when the drive is next opened.
	n=0
	medium=present
	while [ "$n" -lt 60 ]; do
		if ! $b dd if=/dev/sr0 of=/dev/null bs=2048 count=1 2>/dev/null; then
			medium=gone
			break
		fi
		$b sleep 0.5
		n=$((n + 1))
	done
fi
fs=$($b awk '$2 == "/" { t = $3 } END { print t }' /proc/mounts)
base=$($b awk '$2 == "/run/rootfsbase" { t = $3 } END { print t }' /proc/mounts)
p=none
[ -f /persist ] && p=$($b cat /persist)
data=$($b md5sum /data.bin | $b cut -d' ' -f1)
echo "written-by-$$-$($b cut -d' ' -f1 /proc/uptime)" >/persist
$b sync
echo "COMPOSER-IMAGE-ROOT root=$fs base=${base:-none} medium=$medium data=$data persisted=$p token=$($b cat /token)"
$b poweroff -f
"#;

struct Media {
    dir: PathBuf,
    token: String,
    data_md5: String,
    roothash: String,
}

fn tool(name: &str, package: &str) -> Option<PathBuf> {
    support::require_tool(name, package)
}

/// The media, made once: live.iso (LiveOS/squashfs.img), erofs.iso
/// (LiveOS/root.erofs), disk.img (ext4, label diskroot), verity.img and
/// verity-bad.img (a GPT disk: the ext4 root, then its hash tree), gptroot.img (ext4,
/// for gpt-auto's disks) with its hash tree gptroot.verity and gptroot.roothash.
fn media(busybox: &Path) -> Option<Media> {
    let mksquashfs = tool("mksquashfs", "squashfs-tools")?;
    let mkerofs = tool("mkfs.erofs", "erofs-utils")?;
    let xorriso = tool("xorriso", "xorriso")?;
    let mke2fs = tool("mke2fs", "e2fsprogs")?;
    let debugfs = tool("debugfs", "e2fsprogs")?;
    let veritysetup = tool("veritysetup", "cryptsetup-bin")?;
    tool("sfdisk", "fdisk")?;
    let dir = support::cached_asset("image-roots-v4", |tmp| {
        let e = |e: std::io::Error| e.to_string();
        fs::create_dir_all(tmp).map_err(e)?;
        let work = tmp.join("work");
        let token = crate::boot_root::token("image-root");
        let s = crate::boot_root::staging(&work, busybox, &token);
        fs::write(s.join("sbin/init"), INIT).map_err(e)?;
        // 2 MiB that no step before the root's init reads.
        let mut data = vec![0u8; 2 << 20];
        fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut data))
            .map_err(e)?;
        fs::write(s.join("data.bin"), &data).map_err(e)?;
        fs::write(tmp.join("data.md5"), crate::md5::md5_hex(&data)).map_err(e)?;
        fs::write(tmp.join("token"), &token).map_err(e)?;

        for (label, name, image) in [
            (LIVE_LABEL, "squashfs.img", "live.iso"),
            (EROFS_LABEL, "root.erofs", "erofs.iso"),
        ] {
            let iso = work.join(format!("iso-{label}"));
            fs::create_dir_all(iso.join("LiveOS")).map_err(e)?;
            let img = iso.join("LiveOS").join(name);
            if name.ends_with(".erofs") {
                support::run_ok(
                    Command::new(&mkerofs)
                        .args(["-d0", "-zlz4hc"])
                        .arg(&img)
                        .arg(&s),
                );
            } else {
                support::run_ok(Command::new(&mksquashfs).arg(&s).arg(&img).args([
                    "-comp",
                    "xz",
                    "-noappend",
                    "-quiet",
                    "-no-progress",
                ]));
            }
            support::run_ok(
                Command::new(&xorriso)
                    .args(["-as", "mkisofs", "-quiet", "-V", label, "-o"])
                    .arg(tmp.join(image))
                    .arg(&iso),
            );
        }

        // overlayroot's disk; the verity root (4 KiB blocks: dm-verity's data blocks are
        // 4 KiB, and a filesystem's blocks may not be smaller).
        for (name, label) in [
            ("disk.img", "diskroot"),
            ("vdata.img", "vroot"),
            ("gptroot.img", "gptroot"),
        ] {
            support::run_ok(
                Command::new(&mke2fs)
                    .args(["-q", "-t", "ext4", "-b", "4096", "-L", label, "-d"])
                    .arg(&s)
                    .arg(work.join(name))
                    .arg("16M"),
            );
        }
        fs::rename(work.join("disk.img"), tmp.join("disk.img")).map_err(e)?;
        fs::rename(work.join("gptroot.img"), tmp.join("gptroot.img")).map_err(e)?;
        // gpt-auto's verity: the hash tree of gptroot.img, and its root hash.
        let out = support::run_ok(
            Command::new(&veritysetup)
                .arg("format")
                .arg(tmp.join("gptroot.img"))
                .arg(tmp.join("gptroot.verity")),
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let hash = text
            .lines()
            .find_map(|l| l.strip_prefix("Root hash:"))
            .map(|h| h.trim().to_string())
            .ok_or_else(|| format!("veritysetup format printed no root hash: {text}"))?;
        fs::write(tmp.join("gptroot.roothash"), hash).map_err(e)?;
        let vdata = work.join("vdata.img");
        let vhash = work.join("vhash.img");
        let out = support::run_ok(
            Command::new(&veritysetup)
                .arg("format")
                .arg(&vdata)
                .arg(&vhash),
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let roothash = text
            .lines()
            .find_map(|l| l.strip_prefix("Root hash:"))
            .map(|h| h.trim().to_string())
            .ok_or_else(|| format!("veritysetup format printed no root hash: {text}"))?;
        fs::write(tmp.join("roothash"), &roothash).map_err(e)?;
        let data_len = fs::metadata(&vdata).map_err(e)?.len();
        let hash_len = fs::metadata(&vhash).map_err(e)?.len();
        let disk = tmp.join("verity.img");
        let hash_start = (1 << 20) + data_len;
        fs::File::create(&disk)
            .and_then(|f| f.set_len(hash_start + hash_len.max(1 << 20) + (1 << 20)))
            .map_err(e)?;
        support::sfdisk(
            &disk,
            &format!(
                "label: gpt\nstart=2048, size={}, name=vroot-data\nsize=2048, name=vroot-hash\n",
                data_len / 512
            ),
        );
        let mut bytes = fs::read(&disk).map_err(e)?;
        let d = fs::read(&vdata).map_err(e)?;
        let h = fs::read(&vhash).map_err(e)?;
        bytes[1 << 20..(1 << 20) + d.len()].copy_from_slice(&d);
        let hs = hash_start as usize;
        bytes[hs..hs + h.len()].copy_from_slice(&h);
        fs::write(&disk, &bytes).map_err(e)?;
        // One byte of the root's init changed: its first data block, as debugfs maps it.
        let out = support::run_ok(
            Command::new(&debugfs)
                .args(["-R", "bmap /sbin/init 0"])
                .arg(&vdata),
        );
        let block: usize = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| format!("debugfs bmap: {:?}", String::from_utf8_lossy(&out.stdout)))?;
        let at = (1 << 20) + block * 4096 + 40;
        bytes[at] ^= 0x20;
        fs::write(tmp.join("verity-bad.img"), &bytes).map_err(e)?;
        fs::remove_dir_all(&work).map_err(e)
    })?;
    let read = |n: &str| fs::read_to_string(dir.join(n)).unwrap().trim().to_string();
    Some(Media {
        token: read("token"),
        data_md5: read("data.md5"),
        roothash: read("roothash"),
        dir,
    })
}

fn cdrom(iso: &Path) -> Vec<String> {
    vec![
        "-device".into(),
        "virtio-scsi-pci,id=scsi".into(),
        "-drive".into(),
        format!(
            "file={},if=none,id=cd0,media=cdrom,format=raw,readonly=on",
            iso.display()
        ),
        "-device".into(),
        "scsi-cd,drive=cd0".into(),
    ]
}

fn disk(path: &Path, snapshot: bool) -> Vec<String> {
    vec![
        "-drive".into(),
        format!(
            "file={},if=virtio,format=raw{}",
            path.display(),
            if snapshot { ",snapshot=on" } else { "" }
        ),
    ]
}

struct Boot<'a> {
    kernel: &'a DebianKernel,
    image: PathBuf,
    init: &'a str,
}

impl Boot<'_> {
    fn run(
        &self,
        what: &str,
        append: &str,
        args: Vec<String>,
        monitor: Vec<(String, String)>,
    ) -> String {
        let sd = if self.init == "systemd" {
            " systemd.show_status=1 systemd.default_timeout_start_sec=120"
        } else {
            ""
        };
        let opts = BootOptions {
            memory_mib: 1024,
            extra_append: format!("{append} rd.timeout=60{sd}"),
            extra_args: args.iter().map(Into::into).collect(),
            timeout: Duration::from_secs(if self.init == "systemd" { 400 } else { 240 }),
            monitor,
            ..BootOptions::default()
        };
        let r = support::qemu_boot_with(self.kernel, &self.image, &opts);
        eprintln!(
            "--- {}: {what}: {append} ({:.1} s) ---\n{}",
            self.init,
            r.elapsed.as_secs_f64(),
            r.console
        );
        r.console
    }
}

/// `composer check-boot` of `image` with `cmdline`: whether it says bootable, and
/// what it printed.
fn check_boot(kernel: &DebianKernel, image: &Path, cmdline: &str) -> (bool, String) {
    let o = crate::check_boot::check(image, kernel, cmdline, false);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

/// Notes in `failed` each of `want` (`name=value` words) that the marker line of
/// `console` lacks, or that there is none.
fn expect(failed: &mut Vec<String>, what: &str, console: &str, want: &[String]) {
    match marker(console) {
        Some(line) => {
            for w in want {
                if !line.split_whitespace().any(|f| f == w) {
                    failed.push(format!("{what}: `{w}` not in `{line}`"));
                }
            }
        }
        None => failed.push(format!("{what}: the root's init did not run")),
    }
}

/// The marker line the root's init printed, if it printed one.
fn marker(console: &str) -> Option<&str> {
    console
        .lines()
        .find_map(|l| l.split_once("COMPOSER-IMAGE-ROOT ").map(|(_, m)| m))
}

fn image_roots_boot(init: &str) {
    let Some((_, kernel, busybox)) = support::require_platform_env() else {
        return;
    };
    if !support::require_root() {
        return;
    }
    if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let Some(m) = media(&busybox) else {
        return;
    };
    let boot = Boot {
        kernel: &kernel,
        image: support::generic_image(&kernel, init),
        init,
    };
    let scratch = Scratch::new(&format!("image-roots-{init}"));
    let mut failed: Vec<String> = Vec::new();
    let token = format!("token={}", m.token);
    let data = format!("data={}", m.data_md5);
    let live = |label: &str| format!("root=live:CDLABEL={label} rd.live.image");

    // A squashfs on an ISO, a tmpfs upper layer.
    let c = boot.run(
        "squashfs",
        &live(LIVE_LABEL),
        cdrom(&m.dir.join("live.iso")),
        vec![],
    );
    expect(
        &mut failed,
        "squashfs live root",
        &c,
        &[
            "root=overlay".into(),
            "base=squashfs".into(),
            "persisted=none".into(),
            data.clone(),
            token.clone(),
        ],
    );

    // rd.live.ram: the CD ejected once the root runs; its files still read.
    let c = boot.run(
        "rd.live.ram",
        &format!("{} rd.live.ram", live(LIVE_LABEL)),
        cdrom(&m.dir.join("live.iso")),
        vec![("COMPOSER-EJECT-NOW".into(), "eject -f cd0".into())],
    );
    expect(
        &mut failed,
        "rd.live.ram",
        &c,
        &[
            "root=overlay".into(),
            "base=squashfs".into(),
            "medium=gone".into(),
            data.clone(),
            token.clone(),
        ],
    );

    // An erofs image under another name.
    let c = boot.run(
        "erofs",
        &format!("{} rd.live.squashimg=root.erofs", live(EROFS_LABEL)),
        cdrom(&m.dir.join("erofs.iso")),
        vec![],
    );
    expect(
        &mut failed,
        "erofs live root",
        &c,
        &[
            "root=overlay".into(),
            "base=erofs".into(),
            data.clone(),
            token.clone(),
        ],
    );

    // A persistent upper layer: what the first boot wrote, the second reads.
    let persist = scratch.path().join("persist.img");
    fs::File::create(&persist)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    support::run_ok(
        Command::new(support::find_tool("mke2fs").unwrap())
            .args(["-q", "-t", "ext4", "-L", "persist"])
            .arg(&persist),
    );
    let append = format!(
        "{} rd.live.overlay=LABEL=persist:/overlay rd.live.overlay.overlayfs=1",
        live(LIVE_LABEL)
    );
    let mut args = cdrom(&m.dir.join("live.iso"));
    args.extend(disk(&persist, false));
    let first = boot.run(
        "persistent overlay, first boot",
        &append,
        args.clone(),
        vec![],
    );
    expect(
        &mut failed,
        "persistent overlay, first boot",
        &first,
        &["persisted=none".into(), token.clone()],
    );
    let second = boot.run("persistent overlay, second boot", &append, args, vec![]);
    match marker(&second) {
        Some(line) if line.contains("persisted=written-by-") => {}
        other => failed.push(format!(
            "persistent overlay: the second boot did not read what the first wrote: {other:?}"
        )),
    }

    // overlayroot=tmpfs over an ext4 disk, even with rw: the disk is left as it was.
    let copy = scratch.path().join("disk.img");
    fs::copy(m.dir.join("disk.img"), &copy).unwrap();
    let before = fs::read(&copy).unwrap();
    let c = boot.run(
        "overlayroot",
        "root=LABEL=diskroot overlayroot=tmpfs rw",
        disk(&copy, false),
        vec![],
    );
    expect(
        &mut failed,
        "overlayroot=tmpfs",
        &c,
        &[
            "root=overlay".into(),
            "persisted=none".into(),
            token.clone(),
        ],
    );
    if fs::read(&copy).unwrap() != before {
        failed.push("overlayroot=tmpfs: the disk changed".into());
    }

    // dm-verity: the root boots; with one byte of its init changed it is not switched
    // to, and the boot ends as rd.emergency= says, naming verity.
    let verity = format!(
        "roothash={} systemd.verity_root_data=PARTLABEL=vroot-data \
         systemd.verity_root_hash=PARTLABEL=vroot-hash",
        m.roothash
    );
    let c = boot.run(
        "verity",
        &verity,
        disk(&m.dir.join("verity.img"), true),
        vec![],
    );
    expect(
        &mut failed,
        "verity root",
        &c,
        &["root=ext4".into(), token.clone()],
    );
    let c = boot.run(
        "verity, corrupted",
        &format!("{verity} rd.shell=0 rd.emergency=poweroff"),
        disk(&m.dir.join("verity-bad.img"), true),
        vec![],
    );
    if marker(&c).is_some() {
        failed.push("verity: the root with a corrupted init was switched to".into());
    }
    if !c.contains("dm-verity found data on /dev/mapper/root that does not match its root hash") {
        failed.push("verity: the corrupted root's failure does not name dm-verity".into());
    }
    if !c.contains("rd.emergency=poweroff: poweroff in 5 s") || c.contains("--- qemu killed") {
        failed.push(
            "verity: the corrupted root's boot did not end as rd.emergency=poweroff says".into(),
        );
    }
    // check-boot's verdict is each boot's outcome: yes for the generic image and each
    // command line above; no for an image without squashfs booting the live medium and
    // one without dm-verity booting the verity root (both boots fail).
    if init == "shell" {
        let live_cmd = live(LIVE_LABEL);
        let erofs_cmd = format!("{} rd.live.squashimg=root.erofs", live(EROFS_LABEL));
        for cmdline in [&live_cmd, &erofs_cmd, &verity] {
            let (ok, text) = check_boot(&kernel, &boot.image, cmdline);
            if !ok {
                failed.push(format!(
                    "check-boot says no to the generic image with {cmdline}:\n{text}"
                ));
            }
        }
        for (name, omit, cmdline, layer, args) in [
            (
                "no-squashfs",
                "squashfs",
                live_cmd.clone(),
                "live medium",
                cdrom(&m.dir.join("live.iso")),
            ),
            (
                "no-dm-verity",
                "dm-verity",
                verity.clone(),
                "dm-verity",
                disk(&m.dir.join("verity.img"), true),
            ),
        ] {
            let image = support::shared_image(
                &kernel,
                &format!("image-roots-{name}"),
                &format!(
                    "include = [\"generic\"]\ninit = \"shell\"\n\n[omit]\nmodules = [\"{omit}\"]\n"
                ),
            );
            let (ok, text) = check_boot(&kernel, &image, &cmdline);
            if ok || !text.contains(layer) || !text.contains(&omit.replace('-', "_")) {
                failed.push(format!("check-boot of the image without {omit} ({cmdline}) does not say no naming {layer} and {omit}:\n{text}"));
            }
            let b = Boot {
                kernel: &kernel,
                image,
                init,
            };
            let c = b.run(
                name,
                &format!("{cmdline} rd.shell=0 rd.emergency=poweroff"),
                args,
                vec![],
            );
            // It must end where the initrd gives up (not a hang, a crash or a typo).
            if marker(&c).is_some()
                || c.contains("--- qemu killed")
                || !c.contains("composer-init: rd.emergency=poweroff: poweroff in 5 s")
            {
                failed.push(format!(
                    "{name}: the boot reached the root, or did not end where the initrd gives up (check-boot said no)"
                ));
            }
        }
    }

    // No root= and nothing that finds one: the systemd init reaches its root file
    // system target with nothing on /sysroot, and says the boot did not reach the root
    // (it once said the root was mounted but had no init).
    if init == "systemd" {
        let c = boot.run(
            "no root",
            "rd.shell=0 rd.emergency=poweroff",
            vec![],
            vec![],
        );
        if !c.contains("nothing is mounted on /sysroot")
            || !c.contains("the boot did not reach the root")
            || c.contains("cannot be switched to")
        {
            failed.push(
                "no root=: the emergency message does not say that nothing was mounted".into(),
            );
        }
    }
    assert!(failed.is_empty(), "{init}:\n{}", failed.join("\n"));
}

#[test]
fn shell_init_boots_live_media_overlayroot_and_verity() {
    image_roots_boot("shell");
}

#[test]
fn systemd_boots_live_media_overlayroot_and_verity() {
    image_roots_boot("systemd");
}

/// The partition types of the Discoverable Partitions Specification the disks use.
const ESP_TYPE: &str = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B";
const ROOT_X86_64: &str = "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709";
const ROOT_X86_64_VERITY: &str = "2C7357ED-EBD2-46D9-AEC1-23D437EC2BF5";

/// The UUID made of 32 hex digits (a half of a verity root hash), as systemd names
/// the partitions of a root hash.
fn half_uuid(hex: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A GPT disk at `disk` holding each (type, name, filesystem image, partition UUID
/// or none for a random one) as a partition, in order, from 1 MiB.
fn gpt_disk(disk: &Path, parts: &[(&str, &str, &Path, Option<String>)]) {
    let sizes: Vec<u64> = parts
        .iter()
        .map(|(_, _, img, _)| fs::metadata(img).unwrap().len().div_ceil(1 << 20) << 20)
        .collect();
    let total: u64 = (2 << 20) + sizes.iter().sum::<u64>();
    fs::File::create(disk).unwrap().set_len(total).unwrap();
    let mut script = String::from("label: gpt\n");
    for (i, ((ty, name, _, uuid), size)) in parts.iter().zip(&sizes).enumerate() {
        let start = if i == 0 { "start=2048, " } else { "" };
        let uuid = uuid
            .as_ref()
            .map(|u| format!(", uuid={u}"))
            .unwrap_or_default();
        script.push_str(&format!(
            "{start}size={}, type={ty}, name={name}{uuid}\n",
            size / 512
        ));
    }
    support::sfdisk(disk, &script);
    let mut f = fs::OpenOptions::new().write(true).open(disk).unwrap();
    let mut at = 1u64 << 20;
    for ((_, _, img, _), size) in parts.iter().zip(&sizes) {
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(at)).unwrap();
        std::io::copy(&mut fs::File::open(img).unwrap(), &mut f).unwrap();
        at += size;
    }
}

/// gpt-auto: a UKI of the generic image on a GPT disk's ESP, the test root on a
/// partition of the x86-64 root type beside it, no `root=` anywhere: OVMF starts the
/// UKI, its stub says which partition it came from (LoaderDevicePartUUID), and both
/// inits find the root there. With two root partitions the shell init refuses, naming
/// both, and ends as `rd.emergency=poweroff` says. With a root-verity partition beside
/// the root (their PARTUUIDs the halves of the root hash, as systemd-repart makes them)
/// and `roothash=` in the UKI, both inits open the root through dm-verity.
/// check-boot says the generic images (which boot here) can find such a root.
#[test]
fn gpt_auto_finds_the_root_on_the_disk_the_firmware_booted() {
    let Some((_, kernel, busybox)) = support::require_platform_env() else {
        return;
    };
    if !support::require_root() || support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    if crate::uki::uefi_env().is_none() {
        return;
    }
    let stub = support::stub_of(&kernel);
    let Some(m) = media(&busybox) else {
        return;
    };
    let dir = Scratch::new("gpt-auto");
    let token = format!("token={}", m.token);
    let root = m.dir.join("gptroot.img");
    let hash_tree = m.dir.join("gptroot.verity");
    let roothash = fs::read_to_string(m.dir.join("gptroot.roothash"))
        .unwrap()
        .trim()
        .to_string();
    let mut failed = Vec::new();
    // check-boot's verdict for root=gpt-auto (no root= is the same on a machine the
    // firmware started; this one may not be): the root is found at boot (efivarfs
    // reads the loader's partition), the generic image of each init has what that
    // needs.
    for init in ["shell", "systemd"] {
        let (ok, text) = check_boot(
            &kernel,
            &support::generic_image(&kernel, init),
            "root=gpt-auto ro",
        );
        if !ok || !text.contains("gpt-auto") || !text.contains("efivarfs") {
            failed.push(format!(
                "check-boot of the {init} generic image with no root=:\n{text}"
            ));
        }
        // The command line turning discovery off contradicts it: no.
        let (ok, text) = check_boot(
            &kernel,
            &support::generic_image(&kernel, init),
            "root=gpt-auto rd.systemd.gpt_auto=0",
        );
        if ok || !text.contains("rd.systemd.gpt_auto=0 turns off finding the root") {
            failed.push(format!(
                "check-boot of the {init} generic image, root=gpt-auto turned off:\n{text}"
            ));
        }
    }
    for (init, roots) in [
        ("shell", 1),
        ("systemd", 1),
        ("shell", 2),
        ("systemd", 0),
        ("shell", 0),
    ] {
        // roots 0: the root and its root-verity partition, with roothash=.
        let what = match roots {
            0 => format!("{init}, a root and its verity partition"),
            n => format!("{init}, {n} root partition(s)"),
        };
        let verity = if roots == 0 {
            format!(" roothash={roothash}")
        } else {
            String::new()
        };
        let manifest = dir.path().join(format!("{init}.toml"));
        fs::write(
            &manifest,
            format!("include = [\"generic\"]\ninit = \"{init}\"\n"),
        )
        .unwrap();
        let sd = if init == "systemd" {
            " systemd.show_status=1 systemd.default_timeout_start_sec=120"
        } else {
            ""
        };
        let uki = dir.path().join(format!("{init}-{}.efi", roots.min(1)));
        if !uki.exists() {
            support::run_ok(
                support::build_with(&kernel)
                    .arg(&manifest)
                    .args(["--uki", "--kernel"])
                    .arg(&kernel.vmlinuz)
                    .args([
                        "--cmdline",
                        &format!("console=ttyS0 panic=-1 rd.shell=0 rd.emergency=poweroff rd.timeout=60{sd}{verity}"),
                    ])
                    .args(["--stub", stub.to_str().unwrap()])
                    .arg("-o")
                    .arg(&uki),
            );
        }
        let esp_name = format!("{init}-{}", roots.min(1));
        let esp = dir.path().join(format!("{esp_name}.esp"));
        if !esp.exists() {
            crate::uki::esp(dir.path(), &esp_name, &uki);
        }
        let disk = dir.path().join(format!("{init}-{roots}.img"));
        let mut parts: Vec<(&str, &str, &Path, Option<String>)> =
            vec![(ESP_TYPE, "esp", &esp, None)];
        for _ in 0..roots {
            parts.push((ROOT_X86_64, "root-x86-64", &root, None));
        }
        if roots == 0 {
            parts.push((
                ROOT_X86_64,
                "root-x86-64",
                &root,
                Some(half_uuid(&roothash[..32])),
            ));
            parts.push((
                ROOT_X86_64_VERITY,
                "root-x86-64-verity",
                &hash_tree,
                Some(half_uuid(&roothash[32..64])),
            ));
        }
        gpt_disk(&disk, &parts);
        let r = support::qemu_boot_with(
            &kernel,
            &disk,
            &BootOptions {
                memory_mib: 1024,
                timeout: Duration::from_secs(400),
                uefi: Some(crate::uki::firmware(
                    dir.path(),
                    &format!("{init}-{roots}"),
                    false,
                )),
                ..BootOptions::default()
            },
        );
        eprintln!(
            "--- gpt-auto: {what} ({:.1} s) ---\n{}",
            r.elapsed.as_secs_f64(),
            r.console
        );
        let c = &r.console;
        if roots == 0 {
            expect(&mut failed, &what, c, &["root=ext4".into(), token.clone()]);
            let opened = if init == "systemd" {
                // systemd-veritysetup@root.service started (its description ends
                // "Protection Setup for root" in 252 and 257; the status line cuts the
                // rest), and the root mounted from its mapping.
                c.contains("Protection Setup for root")
                    && (c.contains("Using verity root device /dev/mapper/root")
                        || c.contains("Verity Protection Setup for root"))
            } else {
                c.contains("as /dev/mapper/root, checked by dm-verity")
            };
            if !opened {
                failed.push(format!("{what}: dm-verity did not open the root"));
            }
        } else if roots == 1 {
            expect(&mut failed, &what, c, &["root=ext4".into(), token.clone()]);
        } else {
            if marker(c).is_some() {
                failed.push(format!("{what}: a root was chosen"));
            }
            if !c.contains("has 2 partitions of the x86_64 root type (/dev/vda2 /dev/vda3)") {
                failed.push(format!("{what}: the refusal does not name both partitions"));
            }
            if !c.contains("rd.emergency=poweroff: poweroff in 5 s") || r.timed_out {
                failed.push(format!(
                    "{what}: the boot did not end as rd.emergency=poweroff says"
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Mounts made by a test, unmounted (last first) when it ends, however it ends; the
/// loop devices `mount -o loop` set up go with them.
struct Mounts(Vec<PathBuf>);

impl Mounts {
    fn mount(&mut self, args: &[&str], what: &Path, at: &Path) {
        fs::create_dir_all(at).unwrap();
        support::run_ok(Command::new("mount").args(args).arg(what).arg(at));
        self.0.push(at.to_path_buf());
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        for at in self.0.iter().rev() {
            let ok = Command::new("umount")
                .arg(at)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                let _ = Command::new("umount").arg("-l").arg(at).status();
            }
        }
    }
}

/// A hostonly image made on a running live system: `/` an overlay over the squashfs
/// image (a loop device over its file on the live medium, an ext4 stick here, itself a
/// loop device over a file) with a tmpfs upper layer, as the live boot leaves it. The
/// stack follows the overlay, the loop devices' files and the filesystems holding
/// them, so the image loads overlay, squashfs and loop, and `composer why` names each
/// layer.
#[test]
fn a_hostonly_image_made_on_a_live_system_takes_its_layers() {
    let Some(kernel) = support::debian_kernel() else {
        return;
    };
    if !support::require_root() {
        return;
    }
    let (Some(mksquashfs), Some(mke2fs)) = (
        tool("mksquashfs", "squashfs-tools"),
        tool("mke2fs", "e2fsprogs"),
    ) else {
        return;
    };
    let s = Scratch::new("live-hostonly");
    // The live medium: LiveOS/squashfs.img on an ext4 filesystem.
    let tree = s.join("tree");
    fs::create_dir_all(tree.join("etc")).unwrap();
    fs::write(tree.join("etc/hostname"), "live\n").unwrap();
    let stick = s.join("stick");
    fs::create_dir_all(stick.join("LiveOS")).unwrap();
    support::run_ok(
        Command::new(&mksquashfs)
            .arg(&tree)
            .arg(stick.join("LiveOS/squashfs.img"))
            .args(["-noappend", "-quiet", "-no-progress"]),
    );
    let stick_img = s.join("stick.img");
    support::run_ok(
        Command::new(&mke2fs)
            .args(["-q", "-t", "ext4", "-L", "LIVESTICK", "-d"])
            .arg(&stick)
            .arg(&stick_img)
            .arg("8M"),
    );
    let mut mounts = Mounts(Vec::new());
    let medium = s.join("medium");
    let base = s.join("base");
    let rw = s.join("rw");
    let root = s.join("root");
    mounts.mount(&["-t", "ext4", "-o", "loop,ro"], &stick_img, &medium);
    mounts.mount(
        &["-t", "squashfs", "-o", "loop,ro"],
        &medium.join("LiveOS/squashfs.img"),
        &base,
    );
    mounts.mount(&["-t", "tmpfs"], Path::new("tmpfs"), &rw);
    fs::create_dir_all(rw.join("upper")).unwrap();
    fs::create_dir_all(rw.join("work")).unwrap();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        base.display(),
        rw.join("upper").display(),
        rw.join("work").display()
    );
    mounts.mount(&["-t", "overlay", "-o", &opts], Path::new("overlay"), &root);

    let manifest = s.join("live-hostonly.toml");
    fs::write(
        &manifest,
        "[stack]\nfrom_root = true\n\n[[module]]\nrootfs = true\nload = true\n",
    )
    .unwrap();
    let why = support::run_ok(
        support::composer()
            .args(["why", "--kver", &kernel.version, "--kmoddir"])
            .arg(kernel.modules_dir())
            .arg("--root")
            .arg(&root)
            .arg(&manifest)
            .args(["overlay", "squashfs", "loop", "ext4"]),
    );
    let why = String::from_utf8_lossy(&why.stdout);
    let image_file = medium.join("LiveOS/squashfs.img").display().to_string();
    for want in [
        "root filesystem overlay".to_string(),
        format!(
            "{} filesystem squashfs under root filesystem overlay",
            base.display()
        ),
        format!(
            "({image_file}) under {} filesystem squashfs",
            base.display()
        ),
        format!("{} filesystem ext4 under loop device", medium.display()),
    ] {
        assert!(
            why.contains(&want),
            "`composer why` does not say `{want}`:\n{why}"
        );
    }

    let image = s.join("live-hostonly.img");
    support::run_ok(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .arg("--root")
            .arg(&root)
            .arg(&manifest)
            .arg("-o")
            .arg(&image),
    );
    let load = support::modules_load(&image);
    for module in ["overlay", "squashfs", "loop", "ext4"] {
        assert!(
            load.iter().any(|m| m == module),
            "{module} is not loaded by the image made on the live system: {load:?}"
        );
    }
    drop(mounts);
}

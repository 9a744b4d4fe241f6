//! Encrypted and layered roots, as dracut-ng's storage tests (TEST-20, TEST-26,
//! TEST-12) boot them: the disks of the storage matrix (LVM over two disks with a thin
//! pool, md RAID1 under LVM with metadata 0.90 and 1.2, RAID5, md RAID1 -> LUKS2 ->
//! LVM, LUKS on each disk -> md RAID1 -> LVM, btrfs raid1), their configurations, and
//! here the boots that need no check: a RAID1 with a disk missing, started degraded,
//! and three wrong passphrases. Every other boot of the matrix (each configuration
//! with each init's generic image, a key file from crypttab, the command lines that
//! must not boot) is in `check_matrix`, which checks each image before it boots it.
//!
//! This host has no device-mapper, so the disks are made inside a guest: a "makeroot"
//! image that composer builds from `tests/storage/makeroot.toml` (static busybox,
//! cryptsetup, lvm, mdadm, mke2fs, mkfs.btrfs) formats every disk in one boot. The disks
//! are kept in the test assets and shared by every boot (qemu opens them with
//! snapshot=on). Each root's /sbin/init prints a token only that root holds.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::boot_root::{staging, token};
use crate::support::{self, BootOptions, DebianKernel, Scratch};

/// The passphrase of every LUKS volume (typed on the serial console).
pub(crate) const PASSPHRASE: &str = "cmp-Storage-Pass-4711";

const MD090_UUID: &str = "1d0c0090:2b3e4f50:61728394:a5b6c7d8";
pub(crate) const MD12_UUID: &str = "1d0c0012:2b3e4f50:61728394:a5b6c7d8";
const RAID5_UUID: &str = "1d0c0005:2b3e4f50:61728394:a5b6c7d8";
const ENC_MD_UUID: &str = "1d0c00e1:2b3e4f50:61728394:a5b6c7d8";
pub(crate) const LM_MD_UUID: &str = "1d0c00e2:2b3e4f50:61728394:a5b6c7d8";
pub(crate) const ENC_LUKS_UUID: &str = "5a1e0001-0000-4000-8000-00000000e001";
pub(crate) const LM_A_LUKS_UUID: &str = "5a1e0001-0000-4000-8000-00000000e0a1";
pub(crate) const LM_B_LUKS_UUID: &str = "5a1e0001-0000-4000-8000-00000000e0b1";
pub(crate) const RAID5_FS_UUID: &str = "5a1e0005-0000-4000-8000-000000000005";

/// The disks, in the order the makeroot guest sees them (vda, vdb, ...), with their
/// sizes in MiB.
pub(crate) const DISKS: &[(&str, u64)] = &[
    ("lvm-a", 64),
    ("lvm-b", 64),
    ("md090-a", 40),
    ("md090-b", 40),
    ("md12-a", 40),
    ("md12-b", 40),
    ("raid5-a", 32),
    ("raid5-b", 32),
    ("raid5-c", 32),
    ("enc-a", 64),
    ("enc-b", 64),
    ("lm-a", 64),
    ("lm-b", 64),
    ("btrfs-a", 128),
    ("btrfs-b", 128),
];

/// The roots on the disks, each with its own token.
const ROOTS: &[&str] = &[
    "lvm-root", "lvm-thin", "md090", "md12", "raid5", "enc", "lm", "btrfs",
];

/// The formatting the makeroot guest's /init does (after its prelude).
fn makeroot_script() -> String {
    let dev = |name: &str| {
        let i = DISKS.iter().position(|(n, _)| *n == name).unwrap();
        format!("/dev/vd{}", (b'a' + i as u8) as char)
    };
    let luks = "--type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --batch-mode \
                --key-file /stage/passfile";
    format!(
        r#"n=0
while [ ! -b {last} ] && [ $n -lt 100 ]; do $b sleep 0.1; n=$((n + 1)); done
fs() {{ run /usr/sbin/mke2fs -q -t ext4 -E nodiscard "$@"; }}
lvm() {{ run /usr/sbin/lvm "$@"; }}
md() {{ run /usr/sbin/mdadm --create --run --assume-clean --homehost=any "$@"; }}

echo "makeroot: LVM over two disks, with a thin pool"
lvm pvcreate -y {lvm_a} {lvm_b}
lvm vgcreate cmplvm {lvm_a} {lvm_b}
lvm lvcreate -y -Zn -L 72M -n root cmplvm
lvm lvcreate -y -Zn -L 12M -T cmplvm/pool
lvm lvcreate -y -V 32M -T cmplvm/pool -n thin
fs -d /stage/lvm-root /dev/cmplvm/root
fs -d /stage/lvm-thin /dev/cmplvm/thin
lvm vgchange -an cmplvm

echo "makeroot: md RAID1 (0.90) -> LVM"
md /dev/md0 --metadata=0.90 --level=1 --raid-devices=2 --uuid={md090} {md090_a} {md090_b}
lvm pvcreate -y /dev/md0
lvm vgcreate cmpmd090 /dev/md0
lvm lvcreate -y -Zn -L 24M -n root cmpmd090
fs -d /stage/md090 /dev/cmpmd090/root
lvm vgchange -an cmpmd090
run /usr/sbin/mdadm --stop /dev/md0

echo "makeroot: md RAID1 (1.2) -> LVM"
md /dev/md1 --metadata=1.2 --name=md12 --level=1 --raid-devices=2 --uuid={md12} {md12_a} {md12_b}
lvm pvcreate -y /dev/md1
lvm vgcreate cmpmd12 /dev/md1
lvm lvcreate -y -Zn -L 24M -n root cmpmd12
fs -d /stage/md12 /dev/cmpmd12/root
lvm vgchange -an cmpmd12
run /usr/sbin/mdadm --stop /dev/md1

echo "makeroot: md RAID5 over three disks -> ext4"
md /dev/md2 --metadata=1.2 --name=raid5 --level=5 --raid-devices=3 --uuid={raid5} {r5_a} {r5_b} {r5_c}
fs -d /stage/raid5 -U {raid5_fs} -L cmp-raid5 /dev/md2
run /usr/sbin/mdadm --stop /dev/md2

echo "makeroot: md RAID1 -> LUKS2 -> LVM"
md /dev/md3 --metadata=1.2 --name=enc --level=1 --raid-devices=2 --uuid={enc_md} {enc_a} {enc_b}
run /usr/sbin/cryptsetup luksFormat {luks} --uuid {enc_luks} /dev/md3
run /usr/sbin/cryptsetup luksAddKey --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --batch-mode --key-file /stage/passfile /dev/md3 /stage/keyfile
run /usr/sbin/cryptsetup open --key-file /stage/passfile /dev/md3 enc
lvm pvcreate -y /dev/mapper/enc
lvm vgcreate cmpenc /dev/mapper/enc
lvm lvcreate -y -Zn -L 40M -n root cmpenc
fs -d /stage/enc /dev/cmpenc/root
lvm vgchange -an cmpenc
run /usr/sbin/cryptsetup close enc
run /usr/sbin/mdadm --stop /dev/md3

echo "makeroot: LUKS2 on each disk -> md RAID1 -> LVM"
run /usr/sbin/cryptsetup luksFormat {luks} --uuid {lm_a_luks} {lm_a}
run /usr/sbin/cryptsetup luksFormat {luks} --uuid {lm_b_luks} {lm_b}
run /usr/sbin/cryptsetup open --key-file /stage/passfile {lm_a} lma
run /usr/sbin/cryptsetup open --key-file /stage/passfile {lm_b} lmb
md /dev/md4 --metadata=1.2 --name=lm --level=1 --raid-devices=2 --uuid={lm_md} /dev/mapper/lma /dev/mapper/lmb
lvm pvcreate -y /dev/md4
lvm vgcreate cmplm /dev/md4
lvm lvcreate -y -Zn -L 32M -n root cmplm
fs -d /stage/lm /dev/cmplm/root
lvm vgchange -an cmplm
run /usr/sbin/mdadm --stop /dev/md4
run /usr/sbin/cryptsetup close lma
run /usr/sbin/cryptsetup close lmb

echo "makeroot: btrfs raid1 over two disks"
run /usr/sbin/mkfs.btrfs -q -f -L cmp-btrfs-raid1 -d raid1 -m raid1 {btrfs_a} {btrfs_b}
run $b mount -t btrfs {btrfs_a} /mnt
run $b cp -a /stage/btrfs/. /mnt/
run $b umount /mnt

$b sync
echo MAKEROOT-OK
$b poweroff -f
"#,
        last = dev(DISKS[DISKS.len() - 1].0),
        lvm_a = dev("lvm-a"),
        lvm_b = dev("lvm-b"),
        md090 = MD090_UUID,
        md090_a = dev("md090-a"),
        md090_b = dev("md090-b"),
        md12 = MD12_UUID,
        md12_a = dev("md12-a"),
        md12_b = dev("md12-b"),
        raid5 = RAID5_UUID,
        raid5_fs = RAID5_FS_UUID,
        r5_a = dev("raid5-a"),
        r5_b = dev("raid5-b"),
        r5_c = dev("raid5-c"),
        enc_md = ENC_MD_UUID,
        enc_luks = ENC_LUKS_UUID,
        enc_a = dev("enc-a"),
        enc_b = dev("enc-b"),
        lm_md = LM_MD_UUID,
        lm_a_luks = LM_A_LUKS_UUID,
        lm_b_luks = LM_B_LUKS_UUID,
        lm_a = dev("lm-a"),
        lm_b = dev("lm-b"),
        btrfs_a = dev("btrfs-a"),
        btrfs_b = dev("btrfs-b"),
    )
}

/// The disks, made once; the tokens of their roots; the key file of the encrypted one.
pub(crate) struct Disks {
    dir: PathBuf,
    tokens: BTreeMap<String, String>,
}

impl Disks {
    pub(crate) fn disk(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.img"))
    }

    pub(crate) fn token(&self, root: &str) -> &str {
        &self.tokens[root]
    }

    /// Every root's token.
    pub(crate) fn tokens(&self) -> impl Iterator<Item = &str> {
        self.tokens.values().map(String::as_str)
    }

    pub(crate) fn keyfile(&self) -> PathBuf {
        self.dir.join("keyfile")
    }

    /// qemu's arguments for these disks on virtio-blk, snapshot=on, each with its
    /// name as its serial.
    pub(crate) fn attach(&self, names: &[&str]) -> Vec<std::ffi::OsString> {
        names
            .iter()
            .flat_map(|n| support::virtio_disk(&self.disk(n), n, ",snapshot=on"))
            .collect()
    }
}

/// The storage tools the makeroot guest runs, or a skip naming the missing one.
fn require_storage_tools() -> bool {
    [
        ("cryptsetup", "cryptsetup-bin"),
        ("lvm", "lvm2"),
        ("mdadm", "mdadm"),
        ("thin_check", "thin-provisioning-tools"),
        ("mkfs.btrfs", "btrfs-progs"),
        ("mke2fs", "e2fsprogs"),
        ("btrfs", "btrfs-progs"),
    ]
    .iter()
    .all(|(tool, pkg)| support::require_tool(tool, pkg).is_some())
}

/// Makes every disk in one boot of the makeroot guest (cached in the test assets).
pub(crate) fn disks(kernel: &DebianKernel, busybox: &Path) -> Option<Disks> {
    if !require_storage_tools() {
        return None;
    }
    let dir = support::cached_asset("storage-disks-v2", |tmp| {
        fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
        make_disks(tmp, kernel, busybox)
    })?;
    let mut tokens = BTreeMap::new();
    for l in fs::read_to_string(dir.join("tokens")).unwrap().lines() {
        let (root, t) = l.split_once(' ').unwrap();
        tokens.insert(root.to_string(), t.to_string());
    }
    assert_eq!(
        tokens.len(),
        ROOTS.len(),
        "{}: a token per root",
        dir.display()
    );
    Some(Disks { dir, tokens })
}

fn make_disks(dir: &Path, kernel: &DebianKernel, busybox: &Path) -> Result<(), String> {
    let work = dir.join("work");
    let stage = work.join("stage");
    fs::create_dir_all(&stage).map_err(|e| e.to_string())?;
    let mut tokens = String::new();
    for root in ROOTS {
        let t = token(root);
        let s = staging(&work.join(root), busybox, &t);
        fs::rename(&s, stage.join(root)).map_err(|e| e.to_string())?;
        tokens.push_str(&format!("{root} {t}\n"));
    }
    fs::write(stage.join("passfile"), PASSPHRASE).map_err(|e| e.to_string())?;
    let mut key = vec![0u8; 64];
    std::io::Read::read_exact(
        &mut fs::File::open("/dev/urandom").map_err(|e| e.to_string())?,
        &mut key,
    )
    .map_err(|e| e.to_string())?;
    fs::write(stage.join("keyfile"), &key).map_err(|e| e.to_string())?;
    fs::write(dir.join("keyfile"), &key).map_err(|e| e.to_string())?;
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    for (name, mib) in DISKS {
        let disk = dir.join(format!("{name}.img"));
        fs::File::create(&disk)
            .and_then(|f| f.set_len(mib << 20))
            .map_err(|e| e.to_string())?;
        args.push("-drive".into());
        args.push(format!("file={},format=raw,if=virtio", disk.display()).into());
    }
    makeroot(
        kernel,
        "makeroot.toml",
        &work,
        &[
            "virtio_pci",
            "virtio_blk",
            "dm-mod",
            "dm-crypt",
            "dm-thin-pool",
            "raid1",
            "raid456",
            "algif_skcipher",
            "algif_hash",
            "xts",
            "ext4",
            "btrfs",
        ],
        &makeroot_script(),
        &stage,
        args,
        1024,
    )?;
    fs::write(dir.join("tokens"), tokens).map_err(|e| e.to_string())?;
    fs::remove_dir_all(&work).map_err(|e| e.to_string())
}

/// What every makeroot script starts with: the kernel's file systems, lvm and
/// cryptsetup without udev, `fail` (says MAKEROOT-FAIL and powers off) and `run` (a
/// command whose output is shown only when it fails, which then fails the script).
const MAKEROOT_PRELUDE: &str = r#"#!/usr/bin/busybox sh
b=/usr/bin/busybox
$b mkdir -p /proc /sys /dev /run/cryptsetup /run/mdadm /tmp /mnt
$b mount -t proc proc /proc
$b mount -t sysfs sysfs /sys
$b mount -t devtmpfs devtmpfs /dev
export PATH=/usr/sbin:/usr/bin DM_DISABLE_UDEV=1
fail() { echo "MAKEROOT-FAIL: $*"; $b poweroff -f; }
run() { "$@" >/tmp/out 2>&1 || { $b cat /tmp/out; fail "$*"; }; }
"#;

/// One boot of a makeroot guest: the image composer builds from
/// `tests/storage/MANIFEST`, whose /init is [`MAKEROOT_PRELUDE`], then `modprobe` of
/// each of `modules`, then `body`; with `stage` as /stage, on `args` (its disks and
/// devices), in `work`. The guest's failure is the test's: strict or not, a console
/// without `MAKEROOT-OK` panics after it is printed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn makeroot(
    kernel: &DebianKernel,
    manifest: &str,
    work: &Path,
    modules: &[&str],
    body: &str,
    stage: &Path,
    args: Vec<std::ffi::OsString>,
    memory_mib: u32,
) -> Result<(), String> {
    let script_file = work.join("makeroot.sh");
    let script = format!(
        "{MAKEROOT_PRELUDE}for m in {}; do\n    /usr/sbin/modprobe $m || fail \"modprobe $m\"\ndone\n{body}",
        modules.join(" ")
    );
    fs::write(&script_file, script).map_err(|e| e.to_string())?;
    let image = work.join("makeroot.img");
    let manifest_file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/storage")
        .join(manifest);
    support::try_run(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .arg(&manifest_file)
            .arg("--set")
            .arg(format!("script={}", script_file.display()))
            .arg("--set")
            .arg(format!("stage={}", stage.display()))
            .arg("-o")
            .arg(&image),
    )?;
    let opts = BootOptions {
        memory_mib,
        extra_args: args,
        timeout: Duration::from_secs(900),
        ..BootOptions::default()
    };
    let r = support::qemu_boot_with(kernel, &image, &opts);
    eprintln!(
        "--- makeroot, {manifest} ({:.1} s) ---\n{}",
        r.elapsed.as_secs_f64(),
        r.console
    );
    // (The line may start with the firmware's terminal codes.)
    if !support::console_shows(&r.console, "MAKEROOT-OK") {
        panic!("the makeroot guest of {manifest} did not finish (its console is above)");
    }
    Ok(())
}

/// The generic image with `init` for `kernel` (its userland's programs), plus `extra`
/// manifest text (sources named beside the manifest in `dir`).
pub(crate) fn image(dir: &Path, kernel: &DebianKernel, init: &str, extra: &str) -> PathBuf {
    let m = dir.join(format!("storage-{init}.toml"));
    fs::write(
        &m,
        format!("include = [\"generic\"]\ninit = \"{init}\"\n{extra}"),
    )
    .unwrap();
    let out = dir.join(format!("storage-{init}.img"));
    support::run_ok(support::build_with(kernel).arg(&m).arg("-o").arg(&out));
    out
}

/// One boot of a layered root.
struct Case<'a> {
    what: &'a str,
    disks: &'a [&'a str],
    append: String,
    /// Prompts and what to type at each.
    answers: Vec<(String, String)>,
    /// The root whose token must show, or None for a boot that must not reach a root.
    root: Option<&'a str>,
    /// Lines the console must show.
    expect: Vec<String>,
}

pub(crate) fn extra_append(init: &str) -> &'static str {
    match init {
        "systemd" => "systemd.show_status=1 systemd.default_timeout_start_sec=120",
        _ => "",
    }
}

/// Boots each case with `image`; returns what went wrong, case by case.
fn boot_cases(
    kernel: &DebianKernel,
    image: &Path,
    init: &str,
    disks: &Disks,
    cases: &[Case],
) -> Vec<String> {
    let mut failed = Vec::new();
    for c in cases {
        let negative = c.root.is_none();
        let opts = BootOptions {
            memory_mib: 1024,
            extra_append: format!("{} {}", c.append, extra_append(init)),
            extra_args: disks.attach(c.disks),
            timeout: Duration::from_secs(if init == "systemd" { 600 } else { 300 }),
            answers: c.answers.clone(),
            // A negative case ends when the emergency shell answers.
            type_when: negative.then(|| {
                (
                    emergency_marker(init).to_string(),
                    "echo SHELL-ALIVE-$((6*7))\n".to_string(),
                )
            }),
            stop_when: negative.then(|| "SHELL-ALIVE-42".to_string()),
            ..BootOptions::default()
        };
        let r = support::qemu_boot_with(kernel, image, &opts);
        eprintln!(
            "--- {init}: {} ({:.1} s) ---\n{}",
            c.what,
            r.elapsed.as_secs_f64(),
            r.console
        );
        let mut problems = Vec::new();
        match c.root {
            Some(root) => {
                let want = format!("COMPOSER-ROOT-OK {} ", disks.token(root));
                if !r.console.lines().any(|l| l.contains(&want)) {
                    problems.push(format!("no `{want}`"));
                }
            }
            None => {
                for t in disks.tokens.values() {
                    if r.console.contains(t.as_str()) {
                        problems.push(format!("reached a root ({t})"));
                    }
                }
                if !r.console.contains("SHELL-ALIVE-42") {
                    problems.push("no emergency shell answered".into());
                }
            }
        }
        for e in &c.expect {
            if !r.console.contains(e.as_str()) {
                problems.push(format!("no `{e}` on the console"));
            }
        }
        if r.console.contains(PASSPHRASE) {
            problems.push("the passphrase shows on the console".into());
        }
        if !problems.is_empty() {
            failed.push(format!("{}: {}", c.what, problems.join(", ")));
        }
    }
    failed
}

pub(crate) fn emergency_marker(init: &str) -> &'static str {
    match init {
        "systemd" => "composer: emergency mode",
        _ => "starting an emergency shell",
    }
}

fn case<'a>(what: &'a str, disks: &'a [&'a str], append: &str, root: Option<&'a str>) -> Case<'a> {
    Case {
        what,
        disks,
        append: append.to_string(),
        answers: Vec::new(),
        root,
        expect: Vec::new(),
    }
}

/// The passphrase typed at each of `n` prompts.
pub(crate) fn passphrase(init: &str, n: usize) -> Vec<(String, String)> {
    let prompt = match init {
        "systemd" => "Please enter passphrase",
        _ => "Enter passphrase for",
    };
    (0..n)
        .map(|_| (prompt.to_string(), format!("{PASSPHRASE}\n")))
        .collect()
}

/// The platform's kernel and the storage matrix's disks (made by a makeroot guest of
/// this machine's programs and Debian's kernel package).
pub(crate) fn storage_env() -> Option<(DebianKernel, Disks)> {
    let (_, tool_kernel, busybox) = support::require_boot_env()?;
    let (_, kernel, _) = support::require_platform_env()?;
    if !support::require_root() {
        return None;
    }
    let disks = disks(&tool_kernel, &busybox)?;
    Some((kernel, disks))
}

fn run_cases(init: &str, extra: &str, cases: Vec<Case>) {
    let Some((kernel, disks)) = storage_env() else {
        return;
    };
    if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let failed = if extra.is_empty() {
        let image = support::generic_image(&kernel, init);
        boot_cases(&kernel, &image, init, &disks, &cases)
    } else {
        let dir = Scratch::new(&format!("storage-{init}"));
        let image = image(&dir, &kernel, init, extra);
        boot_cases(&kernel, &image, init, &disks, &cases)
    };
    assert!(failed.is_empty(), "{init}: {}", failed.join("; "));
}

pub(crate) const LVM: &[&str] = &["lvm-a", "lvm-b"];
pub(crate) const MD090: &[&str] = &["md090-a", "md090-b"];
pub(crate) const MD12: &[&str] = &["md12-a", "md12-b"];
const MD12_HALF: &[&str] = &["md12-b"];
pub(crate) const RAID5: &[&str] = &["raid5-a", "raid5-b", "raid5-c"];
pub(crate) const ENC: &[&str] = &["enc-a", "enc-b"];
pub(crate) const LM: &[&str] = &["lm-a", "lm-b"];
pub(crate) const BTRFS: &[&str] = &["btrfs-a", "btrfs-b"];

/// md RAID1 (1.2) -> LVM with one disk missing: the array is started degraded after
/// two thirds of rd.retry. (The rest of the storage matrix boots in the check-boot
/// agreement test, `check_matrix`, which checks each image before it boots it.)
fn degraded(init: &str) {
    run_cases(
        init,
        "",
        vec![case(
            "md RAID1 (1.2) -> LVM with one disk missing (degraded)",
            MD12_HALF,
            "root=/dev/cmpmd12/root rd.retry=15 rd.timeout=60",
            Some("md12"),
        )],
    );
}

/// Three wrong passphrases end in the emergency shell, which names the device. (The
/// shell init's is `shell_init_closes_every_volume_before_the_shell_after_wrong_passphrases`.)
fn wrong_passphrase(init: &str) {
    let mut c = case(
        "three wrong passphrases",
        ENC,
        &format!("root=/dev/cmpenc/root rd.luks.uuid={ENC_LUKS_UUID} rd.shell rd.timeout=60"),
        None,
    );
    let prompt = match init {
        "systemd" => "Please enter passphrase",
        _ => "Enter passphrase for",
    };
    c.answers = (0..3)
        .map(|i| (prompt.to_string(), format!("not-the-passphrase-{i}\n")))
        .collect();
    c.expect = vec![ENC_LUKS_UUID.to_string()];
    run_cases(init, "", vec![c]);
}

/// The manifest text that adds a crypttab naming the encrypted root's key file, and
/// that key file, for a manifest in `dir` (both written there and named beside the
/// manifest: the image's programs come from another root).
pub(crate) fn keyfile_extra(dir: &Path, disks: &Disks) -> String {
    fs::write(
        dir.join("crypttab"),
        format!("cmpenc-crypt UUID={ENC_LUKS_UUID} /etc/keys/cmpenc.key luks\n"),
    )
    .unwrap();
    fs::copy(disks.keyfile(), dir.join("cmpenc.key")).unwrap();
    "[[file]]\nsrc = \"crypttab\"\ndst = \"/etc/crypttab\"\nmode = \"0644\"\n\n\
     [[file]]\nsrc = \"cmpenc.key\"\ndst = \"/etc/keys/cmpenc.key\"\nmode = \"0400\"\n"
        .to_string()
}

#[test]
fn shell_init_starts_a_raid1_with_a_disk_missing_degraded() {
    degraded("shell");
}

#[test]
fn systemd_starts_a_raid1_with_a_disk_missing_degraded() {
    degraded("systemd");
}

#[test]
fn systemd_names_the_device_after_three_wrong_passphrases() {
    wrong_passphrase("systemd");
}

/// A person slow to type: the passphrase of md RAID1 -> LUKS2 -> LVM typed 120 s after
/// its prompt shows, with dracut's command line and no rd.timeout (the shell init's
/// default is 30 s), and with rd.timeout=30 (and rd.debug, in the shell init): both
/// boot, as the time at a prompt does not count against the wait for the root, and
/// the passphrase shows nowhere on the console.
fn late_passphrase(init: &str) {
    let Some((kernel, disks)) = storage_env() else {
        return;
    };
    if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let image = support::generic_image(&kernel, init);
    let base = format!("root=/dev/cmpenc/root rd.luks.uuid={ENC_LUKS_UUID} rd.lvm.vg=cmpenc");
    // With rd.timeout=30 the shell init traces every command (rd.debug): the
    // passphrase must not show in the trace either.
    let debug = if init == "shell" { " rd.debug" } else { "" };
    let cases = ["".to_string(), format!(" rd.timeout=30{debug}")]
        .iter()
        .map(|t| {
            (
                format!("{init}: passphrase 120 s late,{t} (no rd.timeout when empty)"),
                BootOptions {
                    memory_mib: 1024,
                    extra_append: format!("{base}{t} {}", extra_append(init)),
                    extra_args: disks.attach(ENC),
                    timeout: Duration::from_secs(if init == "systemd" { 600 } else { 420 }),
                    answers: passphrase(init, 1),
                    answer_delay: Duration::from_secs(120),
                    ..BootOptions::default()
                },
            )
        })
        .collect();
    let want = format!("COMPOSER-ROOT-OK {} ", disks.token("enc"));
    let failed: Vec<String> = support::qemu_boot_all(&kernel, &image, cases)
        .into_iter()
        .filter(|(_, r)| {
            !r.console.lines().any(|l| l.contains(&want)) || r.console.contains(PASSPHRASE)
        })
        .map(|(what, _)| what)
        .collect();
    assert!(
        failed.is_empty(),
        "no `{want}` (or the passphrase shown): {failed:?}"
    );
}

#[test]
fn shell_init_waits_for_a_passphrase_typed_two_minutes_late() {
    late_passphrase("shell");
}

#[test]
fn systemd_waits_for_a_passphrase_typed_two_minutes_late() {
    late_passphrase("systemd");
}

/// After three wrong passphrases and no rd.shell, no shell answers what is typed: the
/// console says why, and the guest reboots (qemu, started with -no-reboot, ends by
/// itself), as Debian's cryptroot does since CVE-2016-4484.
fn no_shell_after_wrong_passphrases(init: &str) {
    let Some((kernel, disks)) = storage_env() else {
        return;
    };
    if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let image = support::generic_image(&kernel, init);
    let prompt = match init {
        "systemd" => "Please enter passphrase",
        _ => "Enter passphrase for",
    };
    let opts = BootOptions {
        memory_mib: 1024,
        extra_append: format!(
            "root=/dev/cmpenc/root rd.luks.uuid={ENC_LUKS_UUID} rd.timeout=20 {}",
            extra_append(init)
        ),
        extra_args: disks.attach(ENC),
        timeout: Duration::from_secs(if init == "systemd" { 600 } else { 300 }),
        answers: (0..3)
            .map(|i| (prompt.to_string(), format!("not-the-passphrase-{i}\n")))
            .collect(),
        type_when: Some((
            "no shell after wrong passphrases".into(),
            "echo SHELL-ALIVE-$((6*7))\n".into(),
        )),
        ..BootOptions::default()
    };
    let r = support::qemu_boot_with(&kernel, &image, &opts);
    eprintln!(
        "--- {init}: three wrong passphrases, no rd.shell ({:.1} s) ---\n{}",
        r.elapsed.as_secs_f64(),
        r.console
    );
    assert!(
        r.console.contains(ENC_LUKS_UUID),
        "{init}: the console does not name the device"
    );
    assert!(
        r.console.contains("no shell after wrong passphrases")
            && r.console.contains("reboot in 5 s"),
        "{init}: the console does not say why there is no shell"
    );
    assert!(
        !r.console.contains("SHELL-ALIVE-42"),
        "{init}: a shell answered"
    );
    assert!(!r.timed_out, "{init}: the guest did not reboot");
}

#[test]
fn shell_init_gives_no_shell_after_three_wrong_passphrases() {
    no_shell_after_wrong_passphrases("shell");
}

#[test]
fn systemd_gives_no_shell_after_three_wrong_passphrases() {
    no_shell_after_wrong_passphrases("systemd");
}

/// A shell that rd.shell did not ask for is no key: the encrypted root's volume,
/// opened by a key file from the image's crypttab, is closed before the emergency
/// shell of a boot whose root (an LV that does not exist) is missing; with rd.shell
/// the administrator asked for the shell, and it stays open.
fn unattended_volumes_closed_before_the_shell(init: &str) {
    let Some((kernel, disks)) = storage_env() else {
        return;
    };
    if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let dir = Scratch::new(&format!("close-{init}"));
    let image = image(
        dir.path(),
        &kernel,
        init,
        &keyfile_extra(dir.path(), &disks),
    );
    // The answer ends in a word no UUID the console lists (hex) can hold: qemu stops
    // at it, not at a device's UUID that happens to hold "-42".
    let check = "[ -e /dev/mapper/cmpenc-crypt ] && echo VOLUME-OPEN-$((6*7))-CHECKED || \
                 echo VOLUME-CLOSED-$((6*7))-CHECKED\n";
    // `panic=` (empty) takes the harness's panic=-1 back from the shell init, whose
    // default is then the shell (the kernel keeps its own).
    let cases = [" panic=", " rd.shell"]
        .iter()
        .map(|extra| {
            (
                format!("{init}: root missing, key file,{extra}"),
                BootOptions {
                    memory_mib: 1024,
                    extra_append: format!(
                        "root=/dev/cmpenc/missing rd.timeout=15{extra} {}",
                        extra_append(init)
                    ),
                    extra_args: disks.attach(ENC),
                    timeout: Duration::from_secs(if init == "systemd" { 400 } else { 240 }),
                    type_when: Some((emergency_marker(init).into(), check.into())),
                    stop_when: Some("42-CHECKED".into()),
                    ..BootOptions::default()
                },
            )
        })
        .collect();
    let results = support::qemu_boot_all(&kernel, &image, cases);
    let (_, plain) = &results[0];
    assert!(
        plain.console.contains("VOLUME-CLOSED-42")
            && plain
                .console
                .contains("closed /dev/mapper/cmpenc-crypt before the shell"),
        "{init}: the volume a key file opened is open in a shell no one asked for"
    );
    let (_, asked) = &results[1];
    assert!(
        asked.console.contains("VOLUME-OPEN-42"),
        "{init}: with rd.shell the volume was closed"
    );
}

#[test]
fn shell_init_closes_what_a_key_file_opened_before_a_shell() {
    unattended_volumes_closed_before_the_shell("shell");
}

#[test]
fn systemd_closes_what_a_key_file_opened_before_a_shell() {
    unattended_volumes_closed_before_the_shell("systemd");
}

/// `rd.lvm.lv=` and `rd.lvm.vg=` together activate both, as dracut does: the root LV
/// of one volume group by rd.lvm.lv, and the other group (on md RAID1) whole by
/// rd.lvm.vg, whose LV the rd.break=pre-pivot shell finds before the boot goes on.
fn lvm_lv_and_vg(init: &str) {
    let Some((kernel, disks)) = storage_env() else {
        return;
    };
    if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let image = support::generic_image(&kernel, init);
    let mut args = disks.attach(LVM);
    args.extend(disks.attach(MD12));
    let opts = BootOptions {
        memory_mib: 1024,
        extra_append: format!(
            "root=/dev/cmplvm/root rd.lvm.lv=cmplvm/root rd.lvm.vg=cmpmd12 rd.break=pre-pivot \
             rd.timeout=60 {}",
            extra_append(init)
        ),
        extra_args: args,
        timeout: Duration::from_secs(if init == "systemd" { 400 } else { 240 }),
        type_when: Some((
            "rd.break=pre-pivot: a shell".into(),
            "[ -e /dev/cmpmd12/root ] && echo OTHER-VG-$((6*7)); exit\n".into(),
        )),
        ..BootOptions::default()
    };
    let r = support::qemu_boot_with(&kernel, &image, &opts);
    eprintln!(
        "--- {init}: rd.lvm.lv= and rd.lvm.vg= ({:.1} s) ---\n{}",
        r.elapsed.as_secs_f64(),
        r.console
    );
    assert!(
        r.console.contains("OTHER-VG-42"),
        "{init}: rd.lvm.vg=cmpmd12 was not activated beside rd.lvm.lv=cmplvm/root"
    );
    let want = format!("COMPOSER-ROOT-OK {} ", disks.token("lvm-root"));
    assert!(r.console.contains(&want), "{init}: no `{want}`");
}

#[test]
fn shell_init_activates_rd_lvm_lv_and_rd_lvm_vg_both() {
    lvm_lv_and_vg("shell");
}

#[test]
fn systemd_activates_rd_lvm_lv_and_rd_lvm_vg_both() {
    lvm_lv_and_vg("systemd");
}

/// An md RAID1 member that appears after the array was started degraded is still
/// added: md12's second disk is plugged in (QMP) after the degraded start (rd.retry=6
/// in the shell init, mdadm's 30 s timer in the systemd init), the root (on another
/// disk, plugged in later still, with rd.timeout=0) holds the initrd until then, and
/// the rd.break=pre-pivot shell shows the array with both members.
fn md_member_after_degraded_start(init: &str) {
    let Some((kernel, disks)) = storage_env() else {
        return;
    };
    if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let Some(busybox) = support::busybox_static() else {
        return;
    };
    let Some((names, token)) = crate::boot_policy::names_disk(&busybox) else {
        return;
    };
    let image = support::generic_image(&kernel, init);
    let dir = Scratch::new(&format!("md-late-{init}"));
    let socket = dir.path().join("qmp.sock");
    let mut args = disks.attach(&["md12-b"]);
    for (file, id) in [(disks.disk("md12-a"), "mda"), (names, "nm")] {
        args.push("-drive".into());
        args.push(
            format!(
                "file={},format=raw,snapshot=on,if=none,id={id}",
                file.display()
            )
            .into(),
        );
    }
    args.push("-qmp".into());
    args.push(format!("unix:{},server=on,wait=off", socket.display()).into());
    let (member_at, root_at) = match init {
        "systemd" => (60, 80),
        _ => (25, 40),
    };
    let opts = BootOptions {
        memory_mib: 1024,
        extra_append: format!(
            "root=PARTUUID={} rd.retry=6 rd.timeout=0 rd.break=pre-pivot {}",
            crate::boot_policy::PARTUUID,
            extra_append(init)
        ),
        extra_args: args,
        timeout: Duration::from_secs(400),
        type_when: Some((
            "rd.break=pre-pivot: a shell".into(),
            "cat /proc/mdstat; echo MDSTAT-$((1+1))-END; exit\n".into(),
        )),
        ..BootOptions::default()
    };
    let plugs = [
        (Duration::from_secs(member_at), "mda", "md12-a"),
        (
            Duration::from_secs(root_at),
            "nm",
            crate::boot_policy::SERIAL,
        ),
    ];
    let (r, plugged) = std::thread::scope(|s| {
        let plug = s.spawn(|| crate::boot_policy::plug_late(&socket, &plugs));
        let r = support::qemu_boot_with(&kernel, &image, &opts);
        (r, plug.join().unwrap())
    });
    eprintln!(
        "--- {init}: an md member after the degraded start ({:.1} s) ---\n{}\n--- QMP ---\n{plugged:?}",
        r.elapsed.as_secs_f64(),
        r.console
    );
    assert!(plugged.is_ok(), "{init}: the disks were not plugged in");
    let mdstat = r
        .console
        .split("MDSTAT-2-END")
        .next()
        .and_then(|c| c.rsplit("cat /proc/mdstat").next())
        .unwrap_or("");
    // "md12 : active (auto-read-only) raid1 vdb[0] vda[1]"
    let members = mdstat
        .lines()
        .find(|l| l.starts_with("md") && l.contains(" : active"))
        .map_or(0, |l| l.matches("vd").count());
    assert_eq!(
        members, 2,
        "{init}: the array does not have both members:\n{mdstat}"
    );
    assert!(
        r.console.contains(&format!("COMPOSER-ROOT-OK {token} ")),
        "{init}: the boot did not go on to the root"
    );
}

#[test]
fn shell_init_adds_an_md_member_that_comes_after_the_degraded_start() {
    md_member_after_degraded_start("shell");
}

#[test]
fn systemd_adds_an_md_member_that_comes_after_the_degraded_start() {
    md_member_after_degraded_start("systemd");
}

/// With rd.shell the shell is given after the last wrong passphrase, and what the boot
/// had opened is closed first: on the LUKS-on-each-disk stack, the first volume's
/// passphrase is typed right, the second's wrong three times; the console names that
/// device, and in the shell no `/dev/mapper/luks-*` volume is open (shell init).
#[test]
fn shell_init_closes_every_volume_before_the_shell_after_wrong_passphrases() {
    let Some((kernel, disks)) = storage_env() else {
        return;
    };
    let image = support::generic_image(&kernel, "shell");
    let mut answers = passphrase("shell", 1);
    answers.extend((0..3).map(|i| {
        (
            "Enter passphrase for".to_string(),
            format!("not-the-passphrase-{i}\n"),
        )
    }));
    let opts = BootOptions {
        memory_mib: 1024,
        extra_append: format!(
            "root=/dev/cmplm/root rd.luks.uuid={LM_A_LUKS_UUID} rd.luks.uuid={LM_B_LUKS_UUID} \
             rd.shell rd.timeout=30"
        ),
        extra_args: disks.attach(LM),
        timeout: Duration::from_secs(300),
        answers,
        type_when: Some((
            "starting an emergency shell".into(),
            "n=0; for d in /dev/mapper/luks-*; do [ -e \"$d\" ] && n=$((n+1)); done; \
             echo OPEN-VOLUMES-$n-$((6*7))-CHECKED\n"
                .into(),
        )),
        // Not "-42" alone: a device's UUID on the console may hold it.
        stop_when: Some("42-CHECKED".into()),
        ..BootOptions::default()
    };
    let r = support::qemu_boot_with(&kernel, &image, &opts);
    eprintln!(
        "--- shell: one passphrase right, three wrong, rd.shell ({:.1} s) ---\n{}",
        r.elapsed.as_secs_f64(),
        r.console
    );
    assert!(
        r.console.contains("closed /dev/mapper/luks-"),
        "the volume the first passphrase opened was not closed"
    );
    assert!(
        r.console.contains("OPEN-VOLUMES-0-42"),
        "a volume is open in the shell"
    );
    assert!(
        r.console.contains(LM_B_LUKS_UUID),
        "the console does not name the device of the wrong passphrases"
    );
    assert!(
        !r.console.contains(PASSPHRASE),
        "the passphrase shows on the console"
    );
}

//! check-boot against the storage matrix: every stack of the storage tests
//! (`boot_storage`) is brought up inside the hostonly guest (`boot_hostonly_stack`), which
//! runs composer there, and each root is mounted read-only so that
//! `composer check-boot --root DIR` reads its stack as a mounted target's. The
//! matrix's images (the generic image of each init, and of each init with a key file
//! in its crypttab) and the generic image without one module a stack needs (raid456,
//! dm-thin-pool, btrfs) are checked there with each command line of the matrix, the
//! ones that must not boot included; the host then boots every row on its disks, and
//! check-boot's verdict must be the boot's outcome. These are the storage matrix's
//! boots: each reaching its root's token, or ending in an emergency shell that
//! answers and names what it looked for.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::boot_storage::{
    self, Disks, BTRFS, DISKS, ENC, ENC_LUKS_UUID, LM, LM_A_LUKS_UUID, LM_B_LUKS_UUID, LM_MD_UUID,
    LVM, MD090, MD12, MD12_UUID, PASSPHRASE, RAID5, RAID5_FS_UUID,
};
use crate::support::{self, BootOptions, DebianKernel};

const INITS: [&str; 2] = ["shell", "systemd"];

/// The shell init's generic image without one module (a `[[tree]]` pattern): the
/// name, the pattern, and the configuration (in [`configs`]) it is booted with.
const BROKEN: [(&str, &str, &str); 3] = [
    ("no-raid456", "**/raid456.ko*", "md raid5"),
    (
        "no-dm-thin-pool",
        "**/dm-thin-pool.ko*",
        "lvm thin, rd.lvm.lv",
    ),
    ("no-btrfs", "**/btrfs.ko*", "btrfs raid1"),
];

/// One configuration of the matrix: a stack and a command line.
struct Config {
    name: &'static str,
    /// The root the stack carries (its mount point in the guest, and its token).
    root: &'static str,
    disks: &'static [&'static str],
    /// The command line without its rd.timeout.
    append: String,
    /// Passphrases typed at the console.
    passphrases: usize,
    /// The layer check-boot must fail because of the command line (none: it passes).
    ruled_out: Option<&'static str>,
}

fn config(
    name: &'static str,
    root: &'static str,
    disks: &'static [&'static str],
    append: String,
    passphrases: usize,
    ruled_out: Option<&'static str>,
) -> Config {
    Config {
        name,
        root,
        disks,
        append,
        passphrases,
        ruled_out,
    }
}

/// The storage matrix's configurations (dracut-ng's TEST-20, TEST-26 and TEST-12),
/// and the command lines that must not boot, each named by its option.
fn configs() -> Vec<Config> {
    let enc = format!("root=/dev/cmpenc/root rd.luks.uuid=luks-{ENC_LUKS_UUID} rd.lvm.vg=cmpenc");
    let lm = format!(
        "root=/dev/cmplm/root rd.luks.uuid={LM_A_LUKS_UUID} rd.luks.uuid={LM_B_LUKS_UUID} \
         rd.md.uuid={LM_MD_UUID} rd.lvm.vg=cmplm"
    );
    let lvm = "root=/dev/cmplvm/root";
    let s = |t: &str| t.to_string();
    vec![
        config(
            "lvm, rd.auto",
            "lvm-root",
            LVM,
            format!("{lvm} rd.auto"),
            0,
            None,
        ),
        config(
            "lvm, rd.lvm.vg",
            "lvm-root",
            LVM,
            format!("{lvm} rd.lvm.vg=cmplvm"),
            0,
            None,
        ),
        config(
            "lvm thin, rd.lvm.lv",
            "lvm-thin",
            LVM,
            s("root=/dev/cmplvm/thin rd.lvm.lv=cmplvm/thin"),
            0,
            None,
        ),
        config(
            "md raid1 0.90 -> lvm",
            "md090",
            MD090,
            s("root=/dev/cmpmd090/root rd.auto"),
            0,
            None,
        ),
        config(
            "md raid1 1.2 -> lvm, rd.md.uuid",
            "md12",
            MD12,
            format!("root=/dev/cmpmd12/root rd.md.uuid={MD12_UUID}"),
            0,
            None,
        ),
        config(
            "md raid5",
            "raid5",
            RAID5,
            format!("root=UUID={RAID5_FS_UUID}"),
            0,
            None,
        ),
        config("md raid1 -> luks -> lvm", "enc", ENC, enc, 1, None),
        config("luks x2 -> md raid1 -> lvm", "lm", LM, lm, 2, None),
        config(
            "btrfs raid1",
            "btrfs",
            BTRFS,
            s("root=LABEL=cmp-btrfs-raid1"),
            0,
            None,
        ),
        config(
            "rd.luks.uuid=failme",
            "enc",
            ENC,
            s("root=/dev/cmpenc/root rd.luks.uuid=failme"),
            0,
            Some("LUKS"),
        ),
        config(
            "rd.md.uuid=failme",
            "md12",
            MD12,
            s("root=/dev/cmpmd12/root rd.md.uuid=failme"),
            0,
            Some("md array"),
        ),
        config(
            "rd.lvm=0",
            "lvm-root",
            LVM,
            format!("{lvm} rd.lvm=0 rd.auto"),
            0,
            Some("LVM volume"),
        ),
        config(
            "rd.lvm.vg=failme",
            "lvm-root",
            LVM,
            format!("{lvm} rd.lvm.vg=failme"),
            0,
            Some("LVM volume"),
        ),
        config(
            "rd.lvm.lv=cmplvm/failme",
            "lvm-root",
            LVM,
            format!("{lvm} rd.lvm.lv=cmplvm/failme"),
            0,
            Some("LVM volume"),
        ),
    ]
}

/// One row: an image booted with a configuration.
pub(crate) struct Row {
    name: String,
    init: &'static str,
    /// `generic-INIT`, `keyfile-INIT` or one of [`BROKEN`].
    image: String,
    root: &'static str,
    disks: &'static [&'static str],
    append: String,
    passphrases: usize,
    /// The layer check-boot must fail (none: it passes).
    fails: Option<&'static str>,
    /// A line the console must show (what a failing boot looked for).
    expect: Option<String>,
}

/// Every row: each configuration with each init's generic image, the key file image
/// of each init, and the broken images.
pub(crate) fn rows() -> Vec<Row> {
    let configs = configs();
    let mut rows = Vec::new();
    for init in INITS {
        // A command line that rules a layer out is judged by check-boot alike for
        // both inits: each such row boots with one of them, in turn.
        let mut ruled_out = 0;
        for c in &configs {
            if c.ruled_out.is_some() {
                ruled_out += 1;
                if (ruled_out % 2 == 0) == (init == "shell") {
                    continue;
                }
            }
            let t = if c.ruled_out.is_some() {
                "rd.shell rd.timeout=15"
            } else {
                "rd.timeout=60"
            };
            rows.push(Row {
                name: format!("{init}: {}", c.name),
                init,
                image: format!("generic-{init}"),
                root: c.root,
                disks: c.disks,
                append: format!("{} {t}", c.append),
                passphrases: c.passphrases,
                fails: c.ruled_out,
                expect: c.ruled_out.map(|_| format!("looked for {}", c.name)),
            });
        }
        rows.push(Row {
            name: format!("{init}: md raid1 -> luks -> lvm, key file from crypttab"),
            init,
            image: format!("keyfile-{init}"),
            root: "enc",
            disks: ENC,
            append: "root=/dev/cmpenc/root rd.timeout=60".into(),
            passphrases: 0,
            fails: None,
            expect: None,
        });
    }
    for (name, _, on) in BROKEN {
        let c = configs.iter().find(|c| c.name == on).unwrap();
        rows.push(Row {
            name: format!("shell: {on}, without {}", &name[3..]),
            init: "shell",
            image: name.to_string(),
            root: c.root,
            disks: c.disks,
            append: format!("{} rd.shell rd.timeout=15", c.append),
            passphrases: c.passphrases,
            fails: Some(match name {
                "no-raid456" => "md array",
                "no-dm-thin-pool" => "LVM volume",
                _ => "root filesystem",
            }),
            expect: None,
        });
    }
    rows
}

/// The images the rows boot, in `dir`: the generic image of each init, the same with
/// a key file in its crypttab (mode 0600, without the passphrase), and the broken
/// ones, repacked from the shell init's generic image without their module.
pub(crate) fn images(kernel: &DebianKernel, disks: &Disks, dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for init in INITS {
        out.push((
            format!("generic-{init}"),
            support::generic_image(kernel, init),
        ));
        let sub = dir.join(format!("keyfile-{init}"));
        fs::create_dir_all(&sub).unwrap();
        let keyfile = boot_storage::image(
            &sub,
            kernel,
            init,
            &boot_storage::keyfile_extra(&sub, disks),
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&keyfile).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "an image holding a key is not 0600: {mode:o}");
        let bytes = fs::read(&keyfile).unwrap();
        assert!(
            !bytes
                .windows(PASSPHRASE.len())
                .any(|w| w == PASSPHRASE.as_bytes()),
            "the image holds the passphrase"
        );
        out.push((format!("keyfile-{init}"), keyfile));
    }
    let generic = support::generic_image(kernel, "shell");
    let tree = dir.join("generic-tree");
    support::run_ok(
        Command::new(env!("CARGO_BIN_EXE_composer"))
            .args(["extract", "--devices", "-C"])
            .arg(&tree)
            .arg(&generic),
    );
    for (name, exclude, _) in BROKEN {
        let m = dir.join(format!("{name}.toml"));
        fs::write(
            &m,
            format!(
                "[[segment]]\nname = \"main\"\ncompression = \"zstd\"\n\n\
                 [[tree]]\nsrc = {}\ndst = \"/\"\nexclude = [\"{exclude}\"]\n",
                support::toml_str(&tree.to_string_lossy())
            ),
        )
        .unwrap();
        let img = dir.join(format!("{name}.img"));
        support::run_ok(
            Command::new(env!("CARGO_BIN_EXE_composer"))
                .args(["build", "--no-check", "--no-sync"])
                .arg(&m)
                .arg("-o")
                .arg(&img),
        );
        out.push((name.to_string(), img));
    }
    out
}

/// The modules the guest loads to bring the stacks up (its root has no module tree),
/// with their dependencies and a modules.dep, unpacked into `into` by composer.
pub(crate) fn module_tree(kernel: &DebianKernel, dir: &Path, into: &Path) {
    let m = dir.join("matrix-modules.toml");
    fs::write(
        &m,
        "init = \"none\"\nmodules = [\"raid456\", \"dm-mod\", \"dm-crypt\", \"dm-thin-pool\", \"btrfs\"]\n",
    )
    .unwrap();
    let img = dir.join("matrix-modules.img");
    support::run_ok(
        support::build_for(&kernel.version, &kernel.modules_dir())
            .arg(&m)
            .arg("-o")
            .arg(&img),
    );
    support::run_ok(
        Command::new(env!("CARGO_BIN_EXE_composer"))
            .args(["extract", "-C"])
            .arg(into)
            .arg(&img),
    );
}

/// The guest's device of a matrix disk: a command substitution of the guest's
/// `disk` function (the disks carry their names as serials, [`Disks::attach`]).
fn dev(name: &str) -> String {
    assert!(
        DISKS.iter().any(|(n, _)| *n == name),
        "no matrix disk {name}"
    );
    format!("$(disk {name})")
}

/// What the guest runs after its own work: the matrix's stacks brought up (as the
/// running machine would have them, udev's by-uuid and by-label links made by hand
/// since no udev runs there), each root mounted read-only under /tmp/mnt, and each row
/// checked with `check-boot --root`. The images are in /tmp/matrix, the results go
/// to /out/matrix. `k` is check-boot's kernel options. The guest finds the
/// matrix's disks by their serials: the script runs after
/// [`support::GUEST_DISK_FN`] has defined `disk`.
pub(crate) fn guest_script(k: &str) -> String {
    let mut checks = String::new();
    for (i, r) in rows().iter().enumerate() {
        checks.push_str(&format!(
            "/tmp/composer check-boot {k} --root /tmp/mnt/{root} --kernel-cmdline '{append}' \
             --json /tmp/matrix/{image}.img >/out/matrix/{i}.json 2>>/out/matrix/check.log\n\
             echo $? >/out/matrix/{i}.rc\n",
            root = r.root,
            append = r.append,
            image = r.image,
        ));
    }
    format!(
        r#"# --- check-boot against the storage matrix ---
$b mkdir -p /out/matrix
export DM_DISABLE_UDEV=1
$b mkdir -p /run/mdadm /run/cryptsetup /run/lock/lvm 2>/dev/null \
    || {{ $b mount -t tmpfs tmpfs /run && $b mkdir -p /run/mdadm /run/cryptsetup /run/lock/lvm; }}
lvmcfg='activation {{ udev_sync = 0 udev_rules = 0 }}'
export LVM_SYSTEM_DIR=/tmp/lvm
$b mkdir -p /tmp/lvm
{{
    # The modules the stacks need, with their dependencies and a modules.dep, in
    # a tree composer made (this root has no module tree, the module disk no
    # modules.dep); modules.dep lists the one to load first last.
    kr=/tmp/matrix/kroot/lib/modules/$($b uname -r)
    kload() {{
        line=$($b grep -E "/$1\.ko[^:]*:" $kr/modules.dep) || return 1
        order=
        for d in ${{line#*:}}; do order="$d $order"; done
        for d in $order ${{line%%:*}}; do
            $b insmod $kr/$d 2>/dev/null
        done
        return 0
    }}
    for m in raid456 dm-mod dm-crypt dm-thin-pool btrfs; do
        kload $m || echo "MATRIX: cannot load $m"
    done
    mdadm --assemble --run /dev/md/md090 {md090_a} {md090_b}
    mdadm --assemble --run /dev/md/md12 {md12_a} {md12_b}
    mdadm --assemble --run /dev/md/raid5 {r5_a} {r5_b} {r5_c}
    mdadm --assemble --run /dev/md/enc {enc_a} {enc_b}
    cryptsetup open --key-file /tmp/matrix/keyfile /dev/md/enc cmpenc-crypt
    printf %s '{pass}' | cryptsetup open --key-file - {lm_a} lma
    printf %s '{pass}' | cryptsetup open --key-file - {lm_b} lmb
    mdadm --assemble --run /dev/md/lm /dev/mapper/lma /dev/mapper/lmb
    lvm vgchange -ay --sysinit --config "$lvmcfg" cmplvm cmpmd090 cmpmd12 cmpenc cmplm
    $b mkdir -p /dev/disk/by-uuid /dev/disk/by-label
    for n in $($b ls /sys/class/block); do
        t= u= l=
        while IFS='=' read -r key val; do
            case $key in TYPE) t=$val ;; UUID) u=$val ;; LABEL) l=$val ;; esac
        done <<EOF
$(blkid -o export /dev/$n 2>/dev/null)
EOF
        case $t in '' | linux_raid_member | LVM2_member) continue ;; esac
        [ -z "$u" ] || $b ln -sf ../../$n /dev/disk/by-uuid/$u
        [ -z "$l" ] || $b ln -sf ../../$n /dev/disk/by-label/$l
    done
    for r in lvm-root:/dev/cmplvm/root lvm-thin:/dev/cmplvm/thin md090:/dev/cmpmd090/root \
        md12:/dev/cmpmd12/root raid5:/dev/disk/by-uuid/{raid5} enc:/dev/cmpenc/root \
        lm:/dev/cmplm/root; do
        $b mkdir -p /tmp/mnt/${{r%%:*}}
        mount -o ro ${{r#*:}} /tmp/mnt/${{r%%:*}} || echo "MATRIX: cannot mount $r"
    done
    $b mkdir -p /tmp/mnt/btrfs
    mount -t btrfs -o ro,device={btrfs_a},device={btrfs_b} {btrfs_a} /tmp/mnt/btrfs \
        || echo "MATRIX: cannot mount btrfs"
    $b cat /proc/mdstat
    $b ls -l /dev/mapper /dev/disk/by-uuid /dev/disk/by-label
}} >/out/matrix/setup.log 2>&1
{checks}$b cat /proc/self/mountinfo >/out/matrix/mountinfo
"#,
        pass = PASSPHRASE,
        md090_a = dev("md090-a"),
        md090_b = dev("md090-b"),
        md12_a = dev("md12-a"),
        md12_b = dev("md12-b"),
        r5_a = dev("raid5-a"),
        r5_b = dev("raid5-b"),
        r5_c = dev("raid5-c"),
        enc_a = dev("enc-a"),
        enc_b = dev("enc-b"),
        lm_a = dev("lm-a"),
        lm_b = dev("lm-b"),
        raid5 = RAID5_FS_UUID,
        btrfs_a = dev("btrfs-a"),
        btrfs_b = dev("btrfs-b"),
    )
}

/// The qemu arguments of every matrix disk, in [`DISKS`] order (snapshot=on).
pub(crate) fn all_disks(disks: &Disks) -> Vec<std::ffi::OsString> {
    let names: Vec<&str> = DISKS.iter().map(|(n, _)| *n).collect();
    disks.attach(&names)
}

/// Reads the guest's verdicts from `got/matrix`, boots every row (two at a time) and
/// asserts that each verdict is the boot's outcome; prints the table.
pub(crate) fn agree(
    kernel: &DebianKernel,
    disks: &Disks,
    got: &Path,
    images: &[(String, PathBuf)],
) {
    let read = |n: &str| fs::read_to_string(got.join("matrix").join(n)).unwrap_or_default();
    eprintln!(
        "--- matrix setup in the guest ---\n{}\n--- check.log ---\n{}",
        read("setup.log"),
        read("check.log")
    );
    let rows = rows();
    let mut verdicts = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let json = read(&format!("{i}.json"));
        let doc: serde_json::Value = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("{}: check-boot --json: {e}: {json}", r.name));
        let failing: Vec<String> = doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| !c["missing"].as_array().unwrap().is_empty())
            .map(|c| {
                format!(
                    "{} ({})",
                    c["layer"].as_str().unwrap_or(""),
                    c["missing"][0].as_str().unwrap_or("")
                )
            })
            .collect();
        let bootable = doc["bootable"] == true;
        // The row's own stack was read, not the guest's (a root that did not mount).
        assert!(
            !json.contains("cmphost"),
            "{}: the guest's own stack: {json}",
            r.name
        );
        match r.fails {
            None => assert!(failing.is_empty(), "{}: fails {failing:?}", r.name),
            Some(layer) => assert!(
                !failing.is_empty() && failing.iter().all(|f| f.starts_with(layer)),
                "{}: should fail only `{layer}`, fails {failing:?}",
                r.name
            ),
        }
        assert_eq!(
            read(&format!("{i}.rc")).trim(),
            if bootable { "0" } else { "1" },
            "{}: check-boot's exit status",
            r.name
        );
        verdicts.push((bootable, failing));
    }
    let image = |name: &str| {
        images
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| p.clone())
            .unwrap()
    };
    // Every row booted (at most two guests at a time, as every boot here); a failing
    // one ends in its init's emergency shell, which must answer.
    type Booted = (bool, Option<&'static str>, f64, Vec<String>);
    let booted: Vec<Booted> = std::thread::scope(|s| {
        let handles: Vec<_> = rows
            .iter()
            .map(|r| {
                let marker = boot_storage::emergency_marker(r.init);
                let opts = BootOptions {
                    memory_mib: 1024,
                    extra_append: format!("{} {}", r.append, boot_storage::extra_append(r.init)),
                    extra_args: disks.attach(r.disks),
                    timeout: Duration::from_secs(if r.init == "systemd" { 600 } else { 300 }),
                    answers: boot_storage::passphrase(r.init, r.passphrases),
                    type_when: Some((marker.to_string(), "echo SHELL-ALIVE-$((6*7))\n".into())),
                    stop_when: Some("SHELL-ALIVE-42".into()),
                    ..BootOptions::default()
                };
                let img = image(&r.image);
                let disks = &*disks;
                let token = format!("COMPOSER-ROOT-OK {} ", disks.token(r.root));
                s.spawn(move || {
                    let b = support::qemu_boot_with(kernel, &img, &opts);
                    let ok = b.console.lines().any(|l| l.contains(&token));
                    let mut problems = Vec::new();
                    if !ok {
                        for t in disks.tokens() {
                            if b.console.contains(t) {
                                problems.push(format!("reached another root ({t})"));
                            }
                        }
                        if !b.console.contains("SHELL-ALIVE-42") {
                            problems.push("no emergency shell answered".to_string());
                        }
                    }
                    if let Some(e) = &r.expect {
                        if !b.console.contains(e.as_str()) {
                            problems.push(format!("no `{e}` on the console"));
                        }
                    }
                    // dm-crypt keeps the cipher it found when the volume opened: the
                    // CPU's (AES-NI, which TCG's `-cpu max` has) must be loaded by then.
                    if ok && matches!(r.root, "enc" | "lm") {
                        let ciphers = b
                            .console
                            .lines()
                            .find_map(|l| l.trim().strip_prefix("COMPOSER-CIPHER"))
                            .map(|c| c.split_whitespace().collect::<Vec<_>>());
                        // The AES-NI drivers: `xts-aes-aesni` (6.1), and the AVX
                        // and VAES ones beside it from 6.10 on (`xts-aes-aesni-avx`,
                        // `xts-aes-vaes-avx2`...); never `xts(ecb(aes-generic))`.
                        let aesni = ciphers.as_ref().is_some_and(|c| {
                            !c.is_empty()
                                && c.iter().all(|d| {
                                    d.starts_with("xts-aes-aesni") || d.starts_with("xts-aes-vaes")
                                })
                        });
                        if !aesni {
                            problems.push(format!(
                                "dm-crypt does not use the CPU's cipher: xts(aes) in use by {ciphers:?}"
                            ));
                        }
                    }
                    if b.console.contains(PASSPHRASE) {
                        problems.push("the passphrase shows on the console".into());
                    }
                    if !ok || !problems.is_empty() {
                        let tail: Vec<&str> = b.console.lines().rev().take(15).collect();
                        let tail: Vec<&str> = tail.into_iter().rev().collect();
                        eprintln!("--- {} ---\n{}", r.name, tail.join("\n"));
                    }
                    let stop = support::initrd_stop(&b.console, opts.answers.len());
                    (ok, stop, b.elapsed.as_secs_f64(), problems)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut table = String::from(
        "| stack, command line | image | check-boot | boot | agree |\n|:---|:---|:---|:---|:---|\n",
    );
    let mut disagree = Vec::new();
    let mut unexplained = Vec::new();
    let mut problems = Vec::new();
    for ((r, (bootable, failing)), (ok, stop, secs, p)) in rows.iter().zip(&verdicts).zip(&booted) {
        if !p.is_empty() {
            problems.push(format!("{}: {}", r.name, p.join(", ")));
        }
        let (verdict, boot, explained) =
            support::agreement_cells(*bootable, failing, *ok, *stop, *secs);
        if !explained {
            unexplained.push(r.name.as_str());
        }
        let agrees = bootable == ok;
        table.push_str(&format!(
            "| {} | {} | {verdict} | {boot} | {} |\n",
            r.name,
            r.image,
            if agrees { "yes" } else { "NO" }
        ));
        if !agrees {
            disagree.push(r.name.as_str());
        }
    }
    eprintln!("--- check-boot against the storage matrix ---\n{table}");
    assert!(
        disagree.is_empty(),
        "check-boot and the boot disagree on {disagree:?}"
    );
    assert!(
        unexplained.is_empty(),
        "boots that stopped without saying why: {unexplained:?}"
    );
    assert!(problems.is_empty(), "{}", problems.join("; "));
}

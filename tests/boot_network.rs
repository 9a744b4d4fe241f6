//! Roots on the network, as dracut-ng's TEST-72-NBD boots them: the ext4 root of
//! `boot_root` exported read-only by nbd-server, the guest on a tap device in a network
//! namespace the test makes (no traffic leaves the machine), dnsmasq as its DHCP
//! server. The image is the generic profile with the network profile and the shell
//! init; the root's /sbin/init prints the token only that root holds.
//!
//! | boot | network | root |
//! |---|---|---|
//! | DHCP | `ip=dhcp` (dnsmasq) | `root=nbd:SERVER:PORT/EXPORT:ext4` |
//! | static | `ip=CLIENT::GW:MASK:HOST:eth0:off` | `root=nbd:SERVER:PORT/EXPORT` (type by blkid) |
//! | root-path | `ip=dhcp` | `root=dhcp`, DHCP's root-path names the NBD root |
//! | no server | `ip=dhcp` | a server that does not exist: the emergency shell names it and the interface's state |
//!
//! iSCSI roots, as dracut-ng's TEST-70-ISCSI boots them: the same ext4 root as LUN 1
//! of a target tgtd serves (read-only) in the namespace, logged in to with
//! iscsistart; `netroot=iscsi:...` with `root=UUID=` and a static `ip=`, and
//! `root=iscsi:...` (the LUN's disk is the root), `root=dhcp` with an iSCSI root-path,
//! and the boot firmware's table (iBFT) iPXE leaves when it boots the guest from the
//! network with `sanhook`.
//!
//! NFS roots, as dracut-ng's TEST-60-NFS boots them: the same root's files exported
//! read-only by nfs-ganesha (this host's kernel has no nfsd) with rpcbind, as NFSv3
//! and NFSv4; `root=nfs:`, `root=/dev/nfs nfsroot=` and `root=dhcp` with DHCP's
//! root-path, each init.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::{self, BootOptions, DebianKernel, Scratch};

/// The server's address on the tap device, and the guest's MAC.
const SERVER: &str = "10.77.0.1";
const MAC: &str = "52:54:00:12:34:56";

/// A network namespace with a tap device for one guest at a time, and the servers
/// started in it. Dropping it kills every process in it and deletes it.
struct Netns {
    name: String,
}

impl Netns {
    fn new(tag: &str) -> Netns {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "composer-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let ns = Netns { name };
        ns.ip(&["netns", "add", &ns.name]);
        ns.ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns.ip(&[
            "-n", &ns.name, "tuntap", "add", "dev", "tap0", "mode", "tap",
        ]);
        ns.ip(&[
            "-n",
            &ns.name,
            "addr",
            "add",
            &format!("{SERVER}/24"),
            "dev",
            "tap0",
        ]);
        ns.ip(&["-n", &ns.name, "link", "set", "tap0", "up"]);
        ns
    }

    fn ip(&self, args: &[&str]) {
        support::run_ok(Command::new("ip").args(args));
    }

    /// Runs `program` in the namespace (a server that puts itself in the background).
    fn start(&self, program: &Path, args: &[String]) {
        support::run_ok(
            Command::new("ip")
                .args(["netns", "exec", &self.name])
                .arg(program)
                .args(args),
        );
    }

    /// qemu's network card on the tap device; without its option ROM (iPXE) unless
    /// the guest boots from the network.
    fn qemu_args(&self, netboot: bool) -> Vec<std::ffi::OsString> {
        let rom = if netboot { "" } else { ",romfile=" };
        [
            "-netdev",
            "tap,id=n0,ifname=tap0,script=no,downscript=no",
            "-device",
            &format!("virtio-net-pci,netdev=n0,mac={MAC}{rom}"),
        ]
        .iter()
        .map(Into::into)
        .collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// What a network boot needs: root, the tools, the kernel, the image and the root.
struct Env {
    kernel: DebianKernel,
    busybox: PathBuf,
    init: &'static str,
    image: PathBuf,
    disk: PathBuf,
    token: String,
    nbd_server: PathBuf,
    dnsmasq: PathBuf,
}

fn env(init: &'static str) -> Option<Env> {
    let (_, kernel, busybox) = support::require_platform_env()?;
    if init == "systemd" {
        support::require_tool("udevadm", "udev")?;
        support::require_tool("/usr/lib/systemd/systemd-networkd", "systemd")?;
    }
    if !support::require_root() {
        return None;
    }
    support::require_tool("ip", "iproute2")?;
    let nbd_server = support::require_tool("nbd-server", "nbd-server")?;
    support::require_tool("nbd-client", "nbd-client")?;
    let dnsmasq = support::require_tool("dnsmasq", "dnsmasq-base")?;
    if !Path::new("/dev/net/tun").exists() {
        if support::strict() {
            panic!("/dev/net/tun is missing: no tap device for the guest");
        }
        support::skip("/dev/net/tun is missing: no tap device for the guest");
        return None;
    }
    let (disk, token) = crate::boot_root::ext4_image(&busybox)?;
    let busybox = busybox.to_path_buf();
    let image = network_image(&kernel, init);
    Some(Env {
        kernel,
        busybox,
        init,
        image,
        disk,
        token,
        nbd_server,
        dnsmasq,
    })
}

/// The generic image with the network profile and `init`, built once a run.
fn network_image(kernel: &DebianKernel, init: &str) -> PathBuf {
    support::shared_image(
        kernel,
        &format!("network-{init}"),
        &format!("include = [\"generic\", \"network\"]\ninit = \"{init}\"\n"),
    )
}

/// nbd-server exporting `disk` (read-only when `readonly`) as `root` on port 10809, and dnsmasq giving
/// out addresses with `root_path` as DHCP's option 17.
fn servers(env: &Env, ns: &Netns, work: &Path, root_path: &str, readonly: bool) {
    let conf = work.join("nbd.conf");
    fs::write(
        &conf,
        format!(
            "[generic]\n\tlistenaddr = {SERVER}\n\tport = 10809\n\n[root]\n\texportname = {}\n\treadonly = {readonly}\n",
            env.disk.display()
        ),
    )
    .unwrap();
    ns.start(&env.nbd_server, &["-C".into(), conf.display().to_string()]);
    dhcp_server(
        env,
        ns,
        work,
        &[format!("--dhcp-option=option:root-path,{root_path}")],
    );
}

/// dnsmasq as the DHCP server on the namespace's tap device (no DNS), with `extra`
/// options; its lease and pid files in `work`.
fn dhcp_server(env: &Env, ns: &Netns, work: &Path, extra: &[String]) {
    let mut args: Vec<String> = [
        "--conf-file=/dev/null",
        "--port=0",
        "--no-hosts",
        "--no-resolv",
        "--interface=tap0",
        "--bind-dynamic",
        "--dhcp-range=10.77.0.100,10.77.0.150,255.255.255.0,1h",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.push(format!(
        "--dhcp-leasefile={}",
        work.join("leases").display()
    ));
    args.push(format!("--pid-file={}", work.join("dnsmasq.pid").display()));
    args.extend_from_slice(extra);
    ns.start(&env.dnsmasq, &args);
}

/// What an iSCSI boot needs: the network environment, a scratch directory and a
/// namespace whose tgtd serves the root as LUN 1 of TARGET.
fn iscsi_env(init: &'static str, tag: &str) -> Option<(Env, Scratch, Netns)> {
    let env = env(init)?;
    support::require_tool("iscsistart", "open-iscsi")?;
    let work = Scratch::new(&format!("iscsi-{tag}"));
    let ns = Netns::new(tag);
    iscsi_target(&ns, &env.disk)?;
    Some((env, work, ns))
}

fn boot(env: &Env, ns: &Netns, what: &str, append: &str, opts: BootOptions) -> String {
    let mut append = append.to_string();
    if env.init == "systemd" {
        append.push_str(" systemd.show_status=1 systemd.default_timeout_start_sec=120");
    }
    let mut extra_args = opts.extra_args.clone();
    extra_args.extend(ns.qemu_args(opts.netboot));
    let opts = BootOptions {
        memory_mib: 1024,
        extra_append: append,
        extra_args,
        netns: Some(ns.name.clone()),
        ..opts
    };
    let r = support::qemu_boot_with(&env.kernel, &env.image, &opts);
    eprintln!(
        "--- {what}, {} init ({:.1} s) ---\n{}",
        env.init,
        r.elapsed.as_secs_f64(),
        r.console
    );
    r.console
}

/// One boot of a root on the network, the root's init saying its token and `fstype`;
/// what went wrong is added to `failed`. The console when the root was reached.
fn boot_to_root(
    env: &Env,
    ns: &Netns,
    what: &str,
    append: &str,
    fstype: &str,
    failed: &mut Vec<String>,
) -> Option<String> {
    let opts = BootOptions {
        timeout: Duration::from_secs(240),
        ..BootOptions::default()
    };
    let console = boot(env, ns, what, append, opts);
    if let Some(l) = missing_program(&console) {
        failed.push(format!("{what}: {l}"));
    }
    let want = format!("COMPOSER-ROOT-OK {} fs={fstype} pid=1", env.token);
    if !support::console_shows(&console, &want) {
        failed.push(format!(
            "{what} ({append}): the console does not show `{want}`"
        ));
        return None;
    }
    Some(console)
}

fn booted(console: &str, token: &str) -> bool {
    let want = format!("COMPOSER-ROOT-OK {token} fs=ext4 pid=1");
    support::console_shows(console, &want)
}

/// A program the network steps run that the image lacks (`/init: 158: rm: not
/// found`).
fn missing_program(console: &str) -> Option<&str> {
    console.lines().find(|l| l.contains(": not found"))
}

#[test]
fn an_nbd_root_boots_by_dhcp_by_a_static_address_and_by_dhcps_root_path() {
    nbd_root_boots("shell");
}

/// systemd-networkd brings the network up (ip= through systemd-network-generator);
/// with root=dhcp, composer-net-root reads the root-path of networkd's lease and
/// mounts the export.
#[test]
fn an_nbd_root_boots_with_systemd_by_dhcp_and_by_a_static_address() {
    nbd_root_boots("systemd");
}

fn nbd_root_boots(init: &'static str) {
    let Some(env) = env(init) else {
        return;
    };
    let work = Scratch::new("nbd-root");
    let ns = Netns::new("nbd");
    let root = format!("nbd:{SERVER}:10809/root:ext4");
    servers(&env, &ns, work.path(), &root, true);
    let boots = [
        ("DHCP", format!("root={root} ip=dhcp rd.timeout=60")),
        (
            "static address",
            format!(
                "root=nbd:{SERVER}:10809/root ip=10.77.0.9::{SERVER}:255.255.255.0:guest:eth0:off rd.timeout=60"
            ),
        ),
        ("root-path", "root=dhcp rd.timeout=60".to_string()),
    ];
    let mut failed = Vec::new();
    for (what, append) in &boots {
        let Some(console) = boot_to_root(&env, &ns, what, append, "ext4", &mut failed) else {
            continue;
        };
        if init == "shell" {
            let said = match *what {
                "static address" => "eth0: 10.77.0.9/24 via 10.77.0.1 (ip=)".to_string(),
                "root-path" => format!("root-path from DHCP: {root}"),
                _ => "eth0: 10.77.0.1".to_string(),
            };
            if !console.contains(&said) {
                failed.push(format!("{what}: the init did not say `{said}`"));
            }
        }
        if !console.contains("connected /dev/nbd0 to NBD server 10.77.0.1 port 10809 export root") {
            failed.push(format!("{what}: no message of the NBD connection"));
        }
    }
    assert!(failed.is_empty(), "{init}: {}", failed.join("; "));
}

/// The iSCSI target's name and the initiator's name the boots give.
const TARGET: &str = "iqn.2026-12.test.composer:root";
const INITIATOR: &str = "iqn.2026-12.test.composer:guest";
/// A second target with the same LUN, which logs in only with CHAP credentials.
const CHAP_TARGET: &str = "iqn.2026-12.test.composer:chap";
const CHAP_USER: &str = "composer";
const CHAP_SECRET: &str = "cmp-Chap-Secret-0815";

/// tgtd in `ns`, serving `disk` read-only as LUN 1 of TARGET to any initiator, and of
/// CHAP_TARGET to an initiator that logs in as CHAP_USER with CHAP_SECRET. Its control
/// socket is a file of the host's: each target gets a port of its own.
fn iscsi_target(ns: &Netns, disk: &Path) -> Option<()> {
    let tgtd = support::require_tool("tgtd", "tgt")?;
    let tgtadm = support::require_tool("tgtadm", "tgt")?;
    static N: AtomicUsize = AtomicUsize::new(0);
    let port = (1000 + std::process::id() % 20000 + 7 * N.fetch_add(1, Ordering::SeqCst) as u32)
        .to_string();
    ns.start(&tgtd, &["--control-port".into(), port.clone()]);
    let adm = |args: &[&str]| {
        Command::new(&tgtadm)
            .args(["-C", &port, "--lld", "iscsi"])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run tgtadm: {e}"))
    };
    // tgtd makes its control socket once it runs in the background.
    let new = [
        "--op", "new", "--mode", "target", "--tid", "1", "-T", TARGET,
    ];
    let mut tries = 0;
    while !adm(&new).status.success() {
        tries += 1;
        assert!(tries < 50, "tgtd did not answer on control port {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let disk = disk.display().to_string();
    // Each target: LUN 1 is the disk, read-only, for any initiator; the second
    // target takes CHAP_USER's credentials only.
    let lun = |tid: &'static str| -> [Vec<&str>; 3] {
        [
            vec![
                "--op",
                "new",
                "--mode",
                "logicalunit",
                "--tid",
                tid,
                "--lun",
                "1",
                "-b",
                &disk,
            ],
            vec![
                "--op",
                "update",
                "--mode",
                "logicalunit",
                "--tid",
                tid,
                "--lun",
                "1",
                "--params",
                "readonly=1",
            ],
            vec![
                "--op", "bind", "--mode", "target", "--tid", tid, "-I", "ALL",
            ],
        ]
    };
    let mut steps: Vec<Vec<&str>> = lun("1").into();
    steps.push(vec![
        "--op",
        "new",
        "--mode",
        "target",
        "--tid",
        "2",
        "-T",
        CHAP_TARGET,
    ]);
    steps.extend(lun("2"));
    steps.push(vec![
        "--op",
        "new",
        "--mode",
        "account",
        "--user",
        CHAP_USER,
        "--password",
        CHAP_SECRET,
    ]);
    steps.push(vec![
        "--op", "bind", "--mode", "account", "--tid", "2", "--user", CHAP_USER,
    ]);
    for args in &steps {
        let args = &args[..];
        let out = adm(args);
        assert!(
            out.status.success(),
            "tgtadm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some(())
}

/// nfs-ganesha and rpcbind in `ns`, exporting the files of the ext4 root `disk`
/// read-only as /export (NFSv3 and NFSv4.0 and 4.1: Debian 12's nfs-ganesha 4.3
/// serves NFSv4.2 reads that kernel 6.12's client, which reads with READ_PLUS there,
/// gets as data it cannot run: "Exec format error" for every program of the root). Both run in a mount namespace of their own:
/// the root's image is loop-mounted there and rpcbind's socket is in that namespace's
/// own /run, so two tests' servers never meet, and the mounts go with the processes
/// when the network namespace's are killed.
fn nfs_server(ns: &Netns, disk: &Path, work: &Path) -> Option<()> {
    let ganesha = support::require_tool("ganesha.nfsd", "nfs-ganesha, nfs-ganesha-vfs")?;
    let rpcbind = support::require_tool("rpcbind", "rpcbind")?;
    let unshare = support::require_tool("unshare", "util-linux")?;
    let conf = work.join("ganesha.conf");
    let log = work.join("ganesha.log");
    fs::write(
        &conf,
        "NFS_CORE_PARAM {\n\
         \tProtocols = 3, 4;\n\
         \tEnable_NLM = false;\n\
         \tEnable_RQUOTA = false;\n\
         \tMNT_Port = 20048;\n\
         \tMount_Path_Pseudo = true;\n\
         }\n\
         NFSV4 {\n\
         \tGraceless = true;\n\
         \tMinor_Versions = 0, 1;\n\
         \tRecoveryRoot = /run/ganesha/recovery;\n\
         }\n\
         EXPORT {\n\
         \tExport_Id = 1;\n\
         \tPath = /run/export;\n\
         \tPseudo = /export;\n\
         \tAccess_Type = RO;\n\
         \tSquash = No_Root_Squash;\n\
         \tSecType = sys;\n\
         \tProtocols = 3, 4;\n\
         \tTransports = UDP, TCP;\n\
         \tFSAL { Name = VFS; }\n\
         }\n",
    )
    .unwrap();
    let script = format!(
        "set -e\n\
         mount -t tmpfs tmpfs /run\n\
         mkdir -p /run/export /run/ganesha/recovery\n\
         mount -o loop,ro,noload {disk} /run/export\n\
         {rpcbind} -w\n\
         {ganesha} -f {conf} -L {log} -p /run/ganesha/pid -N NIV_EVENT\n",
        disk = disk.display(),
        rpcbind = rpcbind.display(),
        ganesha = ganesha.display(),
        conf = conf.display(),
        log = log.display(),
    );
    ns.start(
        &unshare,
        &[
            "--mount".into(),
            "--propagation".into(),
            "private".into(),
            "sh".into(),
            "-c".into(),
            script,
        ],
    );
    // Ready once ganesha says so (no grace period: Graceless).
    for _ in 0..300 {
        let said = fs::read_to_string(&log).unwrap_or_default();
        if said.contains("NFS SERVER INITIALIZED") {
            return Some(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "nfs-ganesha did not start within 30 s:\n{}",
        fs::read_to_string(&log).unwrap_or_default()
    );
}

/// The ext4 root's files over NFS: `root=nfs:SERVER:/export` and `root=dhcp` with
/// DHCP's root-path `SERVER:/export` (NFSv4, as mount.nfs chooses), and
/// `root=/dev/nfs nfsroot=SERVER:/export,vers=3` (NFSv3), all with `ip=dhcp`. The
/// root's init says the type of its mount: nfs (v3) or nfs4.
#[test]
fn an_nfs_root_boots_as_v3_and_v4_with_the_shell_init() {
    nfs_root_boots("shell");
}

#[test]
fn an_nfs_root_boots_as_v3_and_v4_with_systemd() {
    nfs_root_boots("systemd");
}

fn nfs_root_boots(init: &'static str) {
    let Some(env) = env(init) else {
        return;
    };
    if support::require_tool("mount.nfs", "nfs-common").is_none() {
        return;
    }
    let work = Scratch::new("nfs-root");
    let ns = Netns::new("nfs");
    if nfs_server(&ns, &env.disk, work.path()).is_none() {
        return;
    }
    servers(&env, &ns, work.path(), &format!("{SERVER}:/export"), true);
    let boots = [
        (
            "root=nfs:",
            format!("root=nfs:{SERVER}:/export ip=dhcp rd.timeout=90"),
            "nfs4",
        ),
        (
            "nfsroot=",
            format!("root=/dev/nfs nfsroot={SERVER}:/export,vers=3 ip=dhcp rd.timeout=90"),
            "nfs",
        ),
        ("root=dhcp", "root=dhcp rd.timeout=90".to_string(), "nfs4"),
    ];
    let mut failed = Vec::new();
    for (what, append, fstype) in &boots {
        boot_to_root(&env, &ns, what, append, fstype, &mut failed);
    }
    assert!(failed.is_empty(), "{init}: {}", failed.join("; "));
}

/// An ext4 root on an iSCSI target: `netroot=iscsi:...` under `root=UUID=` with a static
/// `ip=`, `root=iscsi:...` itself (by DHCP in the shell init), and `root=dhcp` with DHCP's
/// root-path naming the target.
#[test]
fn an_iscsi_root_boots_with_the_shell_init() {
    iscsi_root_boots("shell");
}

#[test]
fn an_iscsi_root_boots_with_systemd() {
    iscsi_root_boots("systemd");
}

fn iscsi_root_boots(init: &'static str) {
    let Some((env, work, ns)) = iscsi_env(init, "iscsi") else {
        return;
    };
    let root_path = format!("iscsi:{SERVER}:::1:{TARGET}");
    servers(&env, &ns, work.path(), &root_path, true);
    let uuid = crate::boot_root::EXT4_UUID;
    let static_ip = format!("ip=10.77.0.9::{SERVER}:255.255.255.0:guest:eth0:off");
    let dynamic = if init == "shell" {
        "ip=dhcp".to_string()
    } else {
        static_ip.clone()
    };
    let boots = [
        (
            "netroot=iscsi",
            format!(
                "netroot=iscsi:{SERVER}::3260:1:{TARGET} root=UUID={uuid} {static_ip} \
                 rd.iscsi.initiator={INITIATOR} rd.timeout=90"
            ),
        ),
        (
            "root=iscsi",
            format!("root=iscsi:{SERVER}:::1:{TARGET} {dynamic} rd.timeout=90"),
        ),
        ("root=dhcp", "root=dhcp rd.timeout=90".to_string()),
        // CHAP credentials in the spec, traced with rd.debug in the shell init: the
        // password shows nowhere on the console.
        (
            "root=iscsi with CHAP",
            format!(
                "root=iscsi:{CHAP_USER}:{CHAP_SECRET}@{SERVER}:::1:{CHAP_TARGET} {static_ip} \
                 rd.timeout=90{}",
                if init == "shell" { " rd.debug" } else { "" }
            ),
        ),
    ];
    let mut failed = Vec::new();
    for (what, append) in &boots {
        let Some(console) = boot_to_root(&env, &ns, what, append, "ext4", &mut failed) else {
            continue;
        };
        if console.contains(CHAP_SECRET) {
            failed.push(format!("{what}: the CHAP password shows on the console"));
        }
        if *what == "root=iscsi with CHAP" {
            continue;
        }
        let said = format!("root-path from DHCP: {root_path}");
        if *what == "root=dhcp" && !console.contains(&said) {
            failed.push(format!("{what}: the init did not say `{said}`"));
        }
        // The initiator's name: the one given, else one made from the guest's MAC.
        let initiator = if *what == "netroot=iscsi" {
            INITIATOR.to_string()
        } else {
            format!("iqn.2026-12.initrd.composer:{}", MAC.replace(':', ""))
        };
        let said =
            format!("logged in to iSCSI target {TARGET} on {SERVER} port 3260 as {initiator}");
        if !console.contains(&said) {
            failed.push(format!("{what}: the init did not say `{said}`"));
        }
    }
    if init == "shell" {
        // A target the server does not have: the emergency shell names the target,
        // the server and what iscsistart said.
        let opts = BootOptions {
            timeout: Duration::from_secs(240),
            type_when: Some((
                "starting an emergency shell".into(),
                "echo SHELL-ALIVE-$((6*7))\n".into(),
            )),
            stop_when: Some("SHELL-ALIVE-42".into()),
            ..BootOptions::default()
        };
        let console = boot(
            &env,
            &ns,
            "no such target",
            &format!(
                "root=iscsi:{CHAP_USER}:{CHAP_SECRET}@{SERVER}:::1:{TARGET}x {static_ip} \
                 rd.timeout=15 rd.shell"
            ),
            opts,
        );
        for want in [
            &format!(
                "network: iSCSI target {TARGET}x on {SERVER} port 3260: iscsistart: connection"
            )[..],
            "login rejected: initiator error - target not found (02/03)",
            "eth0 mac=",
            &format!("looked for root=iscsi:{CHAP_USER}:***@{SERVER}:::1:{TARGET}x")[..],
            "SHELL-ALIVE-42",
        ] {
            if !console.contains(want) {
                failed.push(format!(
                    "no such target: the console does not show `{want}`"
                ));
            }
        }
        if console.contains(CHAP_SECRET) {
            failed.push("no such target: the CHAP password shows on the console".into());
        }
    }
    assert!(failed.is_empty(), "{init}: {}", failed.join("; "));
}

/// The iSCSI boot firmware's table: the network card's firmware (iPXE) hooks LUN 1 of
/// the target with `sanhook`, which leaves an iBFT in memory, and loads the kernel and
/// image by TFTP (dnsmasq); `rd.iscsi.firmware=1` logs in to the target the table names
/// and the root is found by `root=UUID=` on its disk.
#[test]
fn the_boot_firmwares_iscsi_target_carries_the_root_with_the_shell_init() {
    ibft_root_boots("shell");
}

#[test]
fn the_boot_firmwares_iscsi_target_carries_the_root_with_systemd() {
    ibft_root_boots("systemd");
}

fn ibft_root_boots(init: &'static str) {
    let Some((env, work, ns)) = iscsi_env(init, "ibft") else {
        return;
    };
    let tftp = work.path().join("tftp");
    fs::create_dir_all(&tftp).unwrap();
    fs::copy(&env.kernel.vmlinuz, tftp.join("vmlinuz")).unwrap();
    fs::copy(&env.image, tftp.join("initrd.img")).unwrap();
    // dnsmasq serves only what every user may read (the image is written 0600).
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(tftp.join("initrd.img"), fs::Permissions::from_mode(0o644)).unwrap();
    }
    let uuid = crate::boot_root::EXT4_UUID;
    // The command line is the script's (boot() passes none with netboot).
    let show = if init == "systemd" {
        " systemd.show_status=1"
    } else {
        ""
    };
    fs::write(
        tftp.join("boot.ipxe"),
        format!(
            "#!ipxe\n\
             sanhook iscsi:{SERVER}:::1:{TARGET}\n\
             kernel tftp://{SERVER}/vmlinuz console=ttyS0 rdinit=/init panic=-1 quiet \
             root=UUID={uuid} rd.iscsi.firmware=1 ip=dhcp rd.timeout=90{show}\n\
             initrd tftp://{SERVER}/initrd.img\n\
             boot\n"
        ),
    )
    .unwrap();
    dhcp_server(
        &env,
        &ns,
        work.path(),
        &[
            "--user=root".into(),
            "--dhcp-boot=boot.ipxe".into(),
            "--enable-tftp".into(),
            format!("--tftp-root={}", tftp.display()),
        ],
    );
    let opts = BootOptions {
        timeout: Duration::from_secs(300),
        netboot: true,
        ..BootOptions::default()
    };
    let console = boot(&env, &ns, "iBFT", "", opts);
    let mut failed = Vec::new();
    if let Some(l) = missing_program(&console) {
        failed.push(l.to_string());
    }
    for want in [
        &format!("logged in to the boot firmware's iSCSI targets: {TARGET}")[..],
        &format!("COMPOSER-ROOT-OK {} fs=ext4 pid=1", env.token),
    ] {
        if !console.contains(want) {
            failed.push(format!("the console does not show `{want}`"));
        }
    }
    assert!(failed.is_empty(), "{init}: {}", failed.join("; "));
}

/// A server that is not there: the wait ends at rd.timeout in the emergency shell,
/// which names the server and the interface's state, and answers; with each init.
#[test]
fn an_nbd_server_that_does_not_answer_ends_in_the_emergency_shell() {
    let mut failed = Vec::new();
    for (init, shell, says) in [
        (
            "shell",
            "starting an emergency shell",
            "the root device did not appear within 15 s",
        ),
        (
            "systemd",
            "composer: emergency mode",
            "the NBD root was not connected within 15 s",
        ),
    ] {
        let Some(env) = env(init) else {
            return;
        };
        let work = Scratch::new("nbd-missing");
        let ns = Netns::new("nbdx");
        servers(&env, &ns, work.path(), "", true);
        let opts = BootOptions {
            timeout: Duration::from_secs(300),
            type_when: Some((shell.into(), "echo SHELL-ALIVE-$((6*7))\n".into())),
            stop_when: Some("SHELL-ALIVE-42".into()),
            ..BootOptions::default()
        };
        let console = boot(
            &env,
            &ns,
            "no server",
            "root=nbd:10.77.0.99:10809/root:ext4 ip=dhcp rd.timeout=15 rd.shell",
            opts,
        );
        for want in [
            says,
            "network root: nbd:10.77.0.99:10809/root:ext4 (server 10.77.0.99 port 10809)",
            "network: NBD server 10.77.0.99 port 10809 export root: ",
            &format!("eth0 mac={MAC} state=up carrier=1 addresses: 10.77.0.1"),
            "SHELL-ALIVE-42",
        ] {
            if !console.contains(want) {
                failed.push(format!("{init}: the console does not show `{want}`"));
            }
        }
        if let Some(l) = missing_program(&console) {
            failed.push(format!("{init}: {l}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("; "));
}

/// The network options parse as dracut gives them meaning: the init's functions run
/// in the host's sh.
#[test]
fn network_options_parse_as_dracut_means_them() {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/init/composer-network");
    let work = Scratch::new("network-options");
    let script = format!(
        r#"say() {{ :; }}
. {lib}
nt_dir={dir}
show() {{ echo "$nt_server|$nt_port|$nt_export|$nt_fstype|$nt_flags|$nt_opts"; }}
nt_parse_nbd nbd:10.0.0.1:10809/root:ext4:discard:bs=4096,timeout=30; show
nt_parse_nbd nbd:srv:2000; show
nt_parse_nbd 'nbd:srv:exp*:xfs'; show
nt_parse_nbd nbd:srv; show
nt_parse_nbd nbd:srv:1/e::discard; show
root= nt_netroot=nbd:s:1/e; net_setup; echo "$root|$nt_want|$nt_ips|$net_kind"
root=/dev/vg/lv nt_netroot=nbd:t:2/f; net_setup; echo "$root|$nt_root|$nt_server"
net_arg BOOTIF=01-52-54-00-AB-CD-EF; echo "$nt_bootif"
ishow() {{ echo "$nt_server|$nt_port|$nt_lun|$nt_target|$nt_user|$nt_pass|$nt_ruser|$nt_rpass|$nt_bad"; }}
nt_parse_iscsi iscsi:10.0.0.1::3260:1:iqn.2026-12.org.example:root; ishow
nt_parse_iscsi iscsi:srv::::iqn.2026-12.org.example:disk:2; ishow
nt_parse_iscsi iscsi:me:secret@srv:6:3261:0:iqn.x:t; ishow
nt_parse_iscsi iscsi:me:s:you:t@srv::::iqn.x:t; ishow
nt_bad=; nt_parse_iscsi iscsi:srv::port::iqn.x:t; echo "$nt_bad"
nt_bad=; nt_parse_iscsi iscsi:srv::::; echo "$nt_bad"
nt_bad=; root=iscsi:s::::iqn.y:z nt_netroot=; net_setup; echo "$root|$nt_root|$nt_target|$nt_want"
nt_want=; net_arg rd.iscsi.firmware=1; root=UUID=x nt_netroot=; net_setup; echo "$nt_root|$nt_want"
nt_prefix 255.255.255.0; nt_prefix 255.255.240.0; nt_prefix 16; nt_prefix ''
"#,
        lib = lib.display(),
        dir = work.path().join("net").display()
    );
    let out = support::run_ok(Command::new("sh").arg("-c").arg(&script));
    let out = String::from_utf8_lossy(&out.stdout);
    let want = "10.0.0.1|10809|root|ext4|discard|bs=4096,timeout=30\n\
                srv|2000||||\n\
                srv|10809|exp*|xfs||\n\
                srv|10809||||\n\
                srv|1|e||discard|\n\
                nbd:s:1/e|1|dhcp|boot\n\
                /dev/vg/lv|nbd:t:2/f|t\n\
                52:54:00:ab:cd:ef\n\
                10.0.0.1|3260|1|iqn.2026-12.org.example:root|||||\n\
                srv|3260|0|iqn.2026-12.org.example:disk:2|||||\n\
                srv|3261|0|iqn.x:t|me|secret|||\n\
                srv|3260|0|iqn.x:t|me|s|you|t|\n\
                iscsi:srv::port::iqn.x:t: PORT and LUN are numbers (iscsi:SERVER:[PROTO]:[PORT]:[LUN]:TARGET)\n\
                iscsi:srv::::: a server and a target name are needed (iscsi:SERVER:[PROTO]:[PORT]:[LUN]:TARGET)\n\
                iscsi:s::::iqn.y:z|iscsi:s::::iqn.y:z|iqn.y:z|1\n\
                iscsi-firmware|1\n\
                24\n20\n16\n24\n";
    assert_eq!(out, want);
}

/// The LUKS2 UUID of the encrypted NBD export.
const NBD_LUKS_UUID: &str = "5a1e0001-0000-4000-8000-0000000000b1";

/// A disk holding LUKS2 -> LVM (VG cmpnbd, LV root) -> ext4 with a root of its own,
/// made once in a makeroot guest (this host has no device-mapper); and its token.
fn luks_lvm_disk(kernel: &DebianKernel, busybox: &Path) -> Option<(PathBuf, String)> {
    for (tool, pkg) in [
        ("cryptsetup", "cryptsetup-bin"),
        ("lvm", "lvm2"),
        ("mke2fs", "e2fsprogs"),
    ] {
        support::require_tool(tool, pkg)?;
    }
    let dir = support::cached_asset("nbd-luks-lvm-v2", |tmp| {
        let work = tmp.join("work");
        let stage = work.join("stage");
        fs::create_dir_all(&stage).map_err(|e| e.to_string())?;
        let t = crate::boot_root::token("nbd-luks-lvm");
        let s = crate::boot_root::staging(&work.join("root"), busybox, &t);
        fs::rename(&s, stage.join("root")).map_err(|e| e.to_string())?;
        fs::write(stage.join("passfile"), crate::boot_storage::PASSPHRASE)
            .map_err(|e| e.to_string())?;
        let disk = tmp.join("disk.img");
        fs::File::create(&disk)
            .and_then(|f| f.set_len(64 << 20))
            .map_err(|e| e.to_string())?;
        let script = format!(
            r#"n=0
while [ ! -b /dev/vda ] && [ $n -lt 100 ]; do $b sleep 0.1; n=$((n + 1)); done
run /usr/sbin/cryptsetup luksFormat --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --batch-mode --key-file /stage/passfile --uuid {NBD_LUKS_UUID} /dev/vda
run /usr/sbin/cryptsetup open --key-file /stage/passfile /dev/vda nbdc
run /usr/sbin/lvm pvcreate -y /dev/mapper/nbdc
run /usr/sbin/lvm vgcreate cmpnbd /dev/mapper/nbdc
run /usr/sbin/lvm lvcreate -y -Zn -L 40M -n root cmpnbd
run /usr/sbin/mke2fs -q -t ext4 -E nodiscard -d /stage/root /dev/cmpnbd/root
run /usr/sbin/lvm vgchange -an cmpnbd
run /usr/sbin/cryptsetup close nbdc
$b sync
echo MAKEROOT-OK
$b poweroff -f
"#
        );
        crate::boot_storage::makeroot(
            kernel,
            "makeroot.toml",
            &work,
            &[
                "virtio_pci",
                "virtio_blk",
                "dm-mod",
                "dm-crypt",
                "algif_skcipher",
                "algif_hash",
                "xts",
                "ext4",
            ],
            &script,
            &stage,
            vec![
                "-drive".into(),
                format!("file={},format=raw,if=virtio", disk.display()).into(),
            ],
            1024,
        )?;
        fs::write(tmp.join("token"), &t).map_err(|e| e.to_string())?;
        fs::remove_dir_all(&work).map_err(|e| e.to_string())
    })?;
    let token = fs::read_to_string(dir.join("token")).unwrap();
    Some((dir.join("disk.img"), token.trim().to_string()))
}

/// LUKS2 -> LVM on an NBD export (netroot=, root= the LV on top): the passphrase
/// typed on the console unlocks it, with each init.
#[test]
fn an_encrypted_lvm_root_on_nbd_boots_with_its_passphrase() {
    let mut failed = Vec::new();
    for init in ["shell", "systemd"] {
        let Some(env) = env(init) else {
            return;
        };
        let Some((disk, token)) = luks_lvm_disk(&env.kernel, &env.busybox) else {
            return;
        };
        let work = Scratch::new("nbd-luks");
        // The guest writes (LVM, the journal): it gets a copy.
        let copy = work.path().join("disk.img");
        support::run_ok(
            Command::new("cp")
                .arg("--sparse=always")
                .arg(&disk)
                .arg(&copy),
        );
        let env = Env { disk: copy, ..env };
        let ns = Netns::new("nbdl");
        servers(&env, &ns, work.path(), "", false);
        let opts = BootOptions {
            timeout: Duration::from_secs(300),
            answers: crate::boot_storage::passphrase(init, 1),
            ..BootOptions::default()
        };
        let console = boot(
            &env,
            &ns,
            "LUKS -> LVM on NBD",
            &format!(
                "root=/dev/cmpnbd/root netroot=nbd:{SERVER}:10809/root ip=dhcp \
                 rd.luks.uuid={NBD_LUKS_UUID} rd.lvm.vg=cmpnbd rd.timeout=120"
            ),
            opts,
        );
        let want = format!("COMPOSER-ROOT-OK {token} fs=ext4 pid=1");
        if !support::console_shows(&console, &want) {
            failed.push(format!("{init}: no `{want}`"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("; "));
}

/// An ssh-unlock image (generic + ssh-unlock, `init`) in `work`, with a host key and
/// a client key made there by ssh-keygen: the image, the host keys' directory and
/// the client's private key.
fn ssh_unlock_image(env: &Env, init: &str, work: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let keys = work.join("hostkeys");
    fs::create_dir_all(&keys).unwrap();
    let client = work.join("client");
    for file in [keys.join("ssh_host_ed25519_key"), client.clone()] {
        support::run_ok(
            Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "composer-test", "-f"])
                .arg(&file),
        );
    }
    let manifest = work.join("ssh.toml");
    fs::write(
        &manifest,
        format!(
            "include = [\"generic\", \"ssh-unlock\"]\ninit = \"{init}\"\n\n[vars]\n\
             ssh_authorized_keys = {}\nssh_host_keys = {}\n",
            support::toml_str(&format!("{}.pub", client.display())),
            support::toml_str(&keys.display().to_string()),
        ),
    )
    .unwrap();
    let image = work.join("ssh.img");
    support::run_ok(
        support::build_for(&env.kernel.version, &env.kernel.modules_dir())
            .arg(&manifest)
            .arg("-o")
            .arg(&image),
    );
    (image, keys, client)
}

/// SSH unlock (the ssh-unlock profile): the LUKS2 -> LVM disk attached to the guest,
/// the guest on a static address in the test's namespace. The test connects with ssh,
/// which must know the guest by the root's own host key (the one in known_hosts,
/// strictly checked), and sends the passphrase to `composer-unlock` 30 s past the
/// init's deadline after the prompt (with rd.timeout=30 and with none, the init's
/// default: the time at the prompt is not counted);
/// nothing is typed on the console, and the guest boots to its root's token, with no
/// SSH host key left in the root's /run.
#[test]
fn the_passphrase_sent_over_ssh_unlocks_the_root_with_the_shell_init() {
    ssh_unlock("shell");
}

#[test]
fn the_passphrase_sent_over_ssh_unlocks_the_root_with_systemd() {
    ssh_unlock("systemd");
}

fn ssh_unlock(init: &'static str) {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let Some(env) = env(init) else {
        return;
    };
    for (tool, pkg) in [
        ("ssh", "openssh-client"),
        ("ssh-keygen", "openssh-client"),
        ("dropbear", "dropbear-bin"),
        ("dropbearconvert", "dropbear-bin"),
    ] {
        if support::require_tool(tool, pkg).is_none() {
            return;
        }
    }
    let Some((disk, token)) = luks_lvm_disk(&env.kernel, &env.busybox) else {
        return;
    };
    let work = Scratch::new("ssh-unlock");
    let (image, keys, client) = ssh_unlock_image(&env, init, work.path());
    let guest = "10.77.0.9";
    let host_pub = fs::read_to_string(keys.join("ssh_host_ed25519_key.pub")).unwrap();
    let known = work.path().join("known_hosts");
    fs::write(&known, format!("{guest} {host_pub}")).unwrap();

    let ns = Netns::new("ssh");
    // An unlocker for one boot: it answers over SSH `late` seconds after the prompt,
    // until told the boot is over.
    let unlock_late = |late: u64| {
        let done = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&done);
        let ns = ns.name.clone();
        let (client, known) = (client.clone(), known.clone());
        let handle = std::thread::spawn(move || -> (bool, String) {
            let started = std::time::Instant::now();
            let mut last = String::new();
            // A person slow to answer: the prompt shows within 15 s of the start,
            // the answer comes `late` seconds after that at the earliest.
            let first = Duration::from_secs(15 + late);
            while !done.load(Ordering::SeqCst) && started.elapsed() < first {
                std::thread::sleep(Duration::from_millis(500));
            }
            while !done.load(Ordering::SeqCst)
                && started.elapsed() < first + Duration::from_secs(265)
            {
                std::thread::sleep(Duration::from_secs(3));
                let child = Command::new("ip")
                    .args(["netns", "exec", &ns, "ssh", "-F", "/dev/null"])
                    .args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=5"])
                    .args(["-o", "StrictHostKeyChecking=yes"])
                    .arg("-o")
                    .arg(format!("UserKnownHostsFile={}", known.display()))
                    .args(["-o", "GlobalKnownHostsFile=/dev/null", "-i"])
                    .arg(&client)
                    .arg(format!("root@{guest}"))
                    .arg("composer-unlock")
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn();
                let Ok(mut child) = child else {
                    continue;
                };
                if let Some(mut i) = child.stdin.take() {
                    let _ = std::io::Write::write_all(
                        &mut i,
                        format!("{}\n", crate::boot_storage::PASSPHRASE).as_bytes(),
                    );
                }
                let Ok(out) = child.wait_with_output() else {
                    continue;
                };
                last = String::from_utf8_lossy(&out.stderr).into_owned();
                if out.status.success() {
                    return (true, last);
                }
                if last.contains("Host key verification failed")
                    || last.contains("IDENTIFICATION HAS CHANGED")
                {
                    return (false, last);
                }
            }
            (false, last)
        });
        (stop, handle)
    };
    let env = Env { image, ..env };
    // The disk attached, the guest on its static address; `answers` typed.
    let boot_disk = |what: &str, answers: Vec<(String, String)>, timeout: &str| {
        let opts = BootOptions {
            timeout: Duration::from_secs(420),
            idle: answers.is_empty(),
            extra_args: vec![
                "-drive".into(),
                format!("file={},format=raw,snapshot=on,if=virtio", disk.display()).into(),
            ],
            answers,
            ..BootOptions::default()
        };
        let append = format!(
            "root=/dev/cmpnbd/root rd.luks.uuid={NBD_LUKS_UUID} rd.lvm.vg=cmpnbd \
             ip={guest}::{SERVER}:255.255.255.0::eth0:off{timeout}"
        );
        boot(&env, &ns, what, &append, opts)
    };
    // Answered late with rd.timeout=30, and with none (the init's default: 30 s in
    // the shell init, 90 s in the systemd init): 30 s past it after the prompt.
    let mut console = String::new();
    for (timeout, deadline) in [
        (" rd.timeout=30", 30),
        ("", if init == "systemd" { 90 } else { 30 }),
    ] {
        let (done, unlocker) = unlock_late(deadline + 30);
        console = boot_disk(&format!("SSH unlock,{timeout}"), Vec::new(), timeout);
        done.store(true, Ordering::SeqCst);
        let (unlocked, said) = unlocker.join().unwrap();
        eprintln!("--- ssh's last words ({timeout}) ---\n{said}");
        assert!(unlocked, "ssh did not unlock ({timeout}): {said}");
        assert!(said.contains("passphrase handed over"), "{said}");
        assert!(
            booted(&console, &token),
            "the root's token was not printed ({timeout})"
        );
        assert!(
            !console.contains(crate::boot_storage::PASSPHRASE),
            "the passphrase showed on the console"
        );
        assert!(
            console.contains("COMPOSER-RUN-SSH absent"),
            "the root's /run holds the initrd's SSH host keys"
        );
    }
    if init != "shell" {
        return;
    }
    assert!(console.contains("the passphrase came over SSH"));
    // The console answers as well (the shell init asks on both at once).
    let console = boot_disk(
        "SSH unlock, the passphrase typed on the console",
        crate::boot_storage::passphrase(init, 1),
        " rd.timeout=30",
    );
    assert!(booted(&console, &token), "typed on the console: no token");
    assert!(
        !console.contains(crate::boot_storage::PASSPHRASE),
        "the passphrase typed showed on the console"
    );
    assert!(!console.contains("the passphrase came over SSH"));
}

/// What the ssh-unlock profile may add to a boot whose root needs no network, in
/// seconds of the guest's clock.
const MAX_SSH_COST: f64 = 2.0;

/// The ssh-unlock profile on a root that needs no network (an ext4 root on a local
/// virtio disk), with a network card and no DHCP server (the card on an empty hub):
/// the root is not held for the network. The image boots no later than the same image
/// without ssh-unlock (generic + network) plus 2 s: the guest's clock when the root's
/// init powers off (the kernel's `reboot: Power down`), in the round where the two
/// are closest of up to three (the first round within the bound ends them). The
/// guests run on an instruction-counted clock (`-icount shift=0,sleep=off`: one
/// nanosecond an instruction, idle time skipped), so their
/// times are mostly what the guest did, not what the host's other work left them; but
/// an idle guest waiting on the host (a disk read) skips ahead to its next timer, so a
/// busy host still adds seconds to a round now and then (seen: 2.6 and 3.7 s in two
/// rounds, 0.1 s in the third, on a loaded machine). A wait the profile adds (for
/// DHCP, for the server) is in every round, and so in the closest one too.
fn ssh_unlock_holds_no_local_root(init: &'static str) {
    let Some(env) = env(init) else {
        return;
    };
    for (tool, pkg) in [
        ("ssh-keygen", "openssh-client"),
        ("dropbear", "dropbear-bin"),
    ] {
        if support::require_tool(tool, pkg).is_none() {
            return;
        }
    }
    let work = Scratch::new("ssh-local-root");
    let (ssh_image, _, _) = ssh_unlock_image(&env, init, work.path());
    let uuid = crate::boot_root::EXT4_UUID;
    let opts = BootOptions {
        timeout: Duration::from_secs(240),
        extra_append: format!("root=UUID={uuid} rd.timeout=60"),
        extra_args: vec![
            "-drive".into(),
            format!(
                "file={},format=raw,snapshot=on,if=virtio",
                env.disk.display()
            )
            .into(),
            "-netdev".into(),
            "hubport,id=n0,hubid=0".into(),
            "-device".into(),
            "virtio-net-pci,netdev=n0".into(),
            "-icount".into(),
            "shift=0,sleep=off".into(),
        ],
        ..BootOptions::default()
    };
    let want = format!("COMPOSER-ROOT-OK {} fs=ext4 pid=1", env.token);
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..3 {
        // A round within the bound settles it: the rounds after it could only
        // lower the closest difference.
        if times[0]
            .iter()
            .zip(&times[1])
            .any(|(a, b)| a - b <= MAX_SSH_COST)
        {
            break;
        }
        let results: Vec<(usize, support::BootResult)> = std::thread::scope(|s| {
            let hs: Vec<_> = [&ssh_image, &env.image]
                .into_iter()
                .enumerate()
                .map(|(i, image)| {
                    let opts = opts.clone();
                    let kernel = &env.kernel;
                    s.spawn(move || (i, support::qemu_boot_with(kernel, image, &opts)))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (i, r) in results {
            let what = ["ssh-unlock", "network only"][i];
            eprintln!(
                "--- {init}, {what}, round {round} ({:.1} s) ---\n{}",
                r.elapsed.as_secs_f64(),
                r.console
            );
            assert!(
                support::console_shows(&r.console, &want),
                "{init}, {what}: no `{want}`"
            );
            let down = r
                .console
                .lines()
                .find_map(|l| {
                    let before = &l[..l.find("] reboot: Power down")?];
                    before[before.rfind('[')? + 1..].trim().parse::<f64>().ok()
                })
                .unwrap_or_else(|| panic!("{init}, {what}: no `reboot: Power down` time"));
            times[i].push(down);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // Each round's difference is what the profile costs (the larger image's unpacking,
    // and any wait it adds).
    let diffs: Vec<f64> = times[0].iter().zip(&times[1]).map(|(a, b)| a - b).collect();
    let (ssh, plain) = (median(times[0].clone()), median(times[1].clone()));
    let diff = diffs.iter().copied().fold(f64::INFINITY, f64::min);
    eprintln!(
        "{init}: ssh-unlock {ssh:.1} s, network only {plain:.1} s (medians); \
         differences by round {diffs:.1?}, closest {diff:.1} s"
    );
    assert!(
        diff <= MAX_SSH_COST,
        "{init}: the ssh-unlock image reached its root {diff:.1} s after the image without it \
         in the closest of the rounds (differences {diffs:.1?})"
    );
}

#[test]
fn ssh_unlock_holds_no_local_root_for_the_network_with_the_shell_init() {
    ssh_unlock_holds_no_local_root("shell");
}

#[test]
fn ssh_unlock_holds_no_local_root_for_the_network_with_systemd() {
    ssh_unlock_holds_no_local_root("systemd");
}

/// Tang's port on the namespace's address.
const TANG_PORT: u16 = 7500;

/// The LUKS2 -> LVM disk of `luks_lvm_disk` with a key slot bound by clevis to a Tang
/// server at SERVER:TANG_PORT, bound inside a makeroot guest (`clevis luks bind -d
/// /dev/vda tang '{"url":...,"adv":...}'`: the server's advertisement given, as when
/// a machine is provisioned before its first boot; the slot is the same one a bind
/// over the network writes), and the server's key database (tangd-keygen): made
/// once. The disk, the database and the root's token.
fn tang_disk(env: &Env) -> Option<(PathBuf, PathBuf, String)> {
    for (tool, pkg) in [
        ("clevis", "clevis"),
        ("clevis-luks-bind", "clevis-luks"),
        ("pwmake", "libpwquality-tools"),
        ("jose", "jose"),
        ("curl", "curl"),
        ("socat", "socat"),
        ("/usr/libexec/tangd", "tang"),
        ("/usr/libexec/tangd-keygen", "tang"),
    ] {
        support::require_tool(tool, pkg)?;
    }
    // pwmake checks the key it makes against cracklib's dictionary.
    if !Path::new("/var/cache/cracklib/cracklib_dict.pwd").exists() {
        support::skip("cracklib's dictionary not found (Debian package cracklib-runtime)");
        return None;
    }
    let (disk, token) = luks_lvm_disk(&env.kernel, &env.busybox)?;
    let dir = support::cached_asset("tang-luks-lvm-v2", |tmp| {
        fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
        let copy = tmp.join("disk.img");
        support::try_run(
            Command::new("cp")
                .arg("--sparse=always")
                .arg(&disk)
                .arg(&copy),
        )?;
        let db = tmp.join("db");
        fs::create_dir_all(&db).map_err(|e| e.to_string())?;
        support::try_run(Command::new("/usr/libexec/tangd-keygen").arg(&db))?;
        // The advertisement: what tangd answers to GET /adv (its HTTP body).
        let mut tangd = Command::new("/usr/libexec/tangd")
            .arg(&db)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        std::io::Write::write_all(
            tangd.stdin.as_mut().unwrap(),
            b"GET /adv HTTP/1.1\r\nHost: tang\r\n\r\n",
        )
        .map_err(|e| e.to_string())?;
        drop(tangd.stdin.take());
        let out = tangd.wait_with_output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .ok_or_else(|| format!("tangd's answer to GET /adv has no body: {text}"))?;
        let work = tmp.join("work");
        let stage = work.join("stage");
        fs::create_dir_all(&stage).map_err(|e| e.to_string())?;
        fs::write(stage.join("adv.jws"), body).map_err(|e| e.to_string())?;
        fs::write(stage.join("passfile"), crate::boot_storage::PASSPHRASE)
            .map_err(|e| e.to_string())?;
        let script = format!(
            r#"n=0
while [ ! -b /dev/vda ] && [ $n -lt 100 ]; do $b sleep 0.1; n=$((n + 1)); done
# cracklib's check of the new key looks the user up: an unknown one fails it.
echo 'root:x:0:0:root:/root:/bin/sh' >/etc/passwd
# bash's process substitution (clevis-encrypt-tang) reads /dev/fd.
$b ln -s /proc/self/fd /dev/fd
run clevis luks bind -y -k /stage/passfile -d /dev/vda tang '{{"url":"http://{SERVER}:{TANG_PORT}","adv":"/stage/adv.jws"}}'
clevis luks list -d /dev/vda >/tmp/list 2>&1 || {{ $b cat /tmp/list; fail "clevis luks list"; }}
$b grep -q 'tang' /tmp/list || {{ $b cat /tmp/list; fail "no tang binding listed"; }}
echo "BOUND: $($b cat /tmp/list)"
$b sync
echo MAKEROOT-OK
$b poweroff -f
"#
        );
        crate::boot_storage::makeroot(
            &env.kernel,
            "makeroot-clevis.toml",
            &work,
            &["virtio_pci", "virtio_blk", "algif_skcipher", "xts"],
            &script,
            &stage,
            vec![
                "-drive".into(),
                format!("file={},format=raw,if=virtio", copy.display()).into(),
            ],
            1024,
        )?;
        fs::remove_dir_all(&work).map_err(|e| e.to_string())
    })?;
    Some((dir.join("disk.img"), dir.join("db"), token))
}

/// tangd serving `db` on SERVER:TANG_PORT in the namespace, one tangd a connection
/// (socat in its place of systemd's socket activation); it ends with the namespace.
fn tang_server(ns: &Netns, db: &Path) {
    let child = Command::new("ip")
        .args(["netns", "exec", &ns.name, "socat"])
        .arg(format!(
            "TCP-LISTEN:{TANG_PORT},bind={SERVER},reuseaddr,fork"
        ))
        .arg(format!("EXEC:/usr/libexec/tangd {}", db.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("socat starts");
    // Reaped by a thread: the namespace's end kills it.
    std::thread::spawn(move || {
        let mut child = child;
        let _ = child.wait();
    });
    // Listening before the guest asks.
    for _ in 0..50 {
        let listening = Command::new("ip")
            .args(["netns", "exec", &ns.name, "ss", "-Hltn"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains(&format!(":{TANG_PORT}")))
            .unwrap_or(false);
        if listening {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("tangd (socat) does not listen on {SERVER}:{TANG_PORT}");
}

/// What both inits say when their Tang tries end at rd.timeout.
const GAVE_UP: &str = "no Tang server";

/// Tang unlock (the clevis profile): the LUKS2 -> LVM root's volume bound to a tangd
/// in the test's namespace, the guest on DHCP (no ip=: the network comes up for the
/// bound volume). With the server there, the root boots with nothing typed and the
/// console says Tang opened it (with rd.timeout=180: the tries start at the prompt,
/// with the network still to come up, and an emulated guest beside others on a
/// loaded machine once took more than 90 s to get the key); with the server gone,
/// the prompt shows before the tries end at rd.timeout=40 (the message that they
/// ended comes after it), and the passphrase typed after that message boots and
/// does not show on the console.
#[test]
fn a_root_bound_to_tang_unlocks_with_the_shell_init() {
    tang_unlock("shell");
}

#[test]
fn a_root_bound_to_tang_unlocks_with_systemd() {
    tang_unlock("systemd");
}

fn tang_unlock(init: &'static str) {
    let Some(env) = env(init) else {
        return;
    };
    let Some((disk, db, token)) = tang_disk(&env) else {
        return;
    };
    let image = support::shared_image(
        &env.kernel,
        &format!("clevis-{init}"),
        &format!("include = [\"generic\", \"clevis\"]\ninit = \"{init}\"\n"),
    );
    let env = Env { image, ..env };
    let work = Scratch::new("tang");
    // The disk attached, the guest on DHCP; `answers` typed.
    let boot_disk = |ns: &Netns, what: &str, answers: Vec<(String, String)>, rd_timeout: u32| {
        let opts = BootOptions {
            timeout: Duration::from_secs(420),
            extra_args: vec![
                "-drive".into(),
                format!("file={},format=raw,snapshot=on,if=virtio", disk.display()).into(),
            ],
            answers,
            ..BootOptions::default()
        };
        let append = format!(
            "root=/dev/cmpnbd/root rd.luks.uuid={NBD_LUKS_UUID} rd.lvm.vg=cmpnbd \
             rd.timeout={rd_timeout}"
        );
        boot(&env, ns, what, &append, opts)
    };
    let mut failed = Vec::new();

    let ns = Netns::new("tang");
    dhcp_server(&env, &ns, work.path(), &[]);
    tang_server(&ns, &db);
    // A deadline a loaded machine does not miss (the cards' drivers and DHCP, then
    // clevis' dozens of processes, in an emulated guest beside two others): the boot
    // goes on as soon as Tang answers.
    let console = boot_disk(&ns, "Tang unlock", Vec::new(), 180);
    if !booted(&console, &token) {
        failed.push("with the server there, nothing typed: no root".to_string());
    }
    if !console.contains("with Tang") {
        failed.push("with the server there: the console does not say Tang opened it".into());
    }
    if let Some(l) = missing_program(&console) {
        failed.push(format!("with the server there: {l}"));
    }
    drop(ns);

    // No server: only DHCP answers.
    let ns = Netns::new("notang");
    dhcp_server(&env, &ns, work.path(), &[]);
    let prompt = crate::boot_storage::passphrase(init, 1);
    // Typed once the tries have ended (a time after the prompt would race them on a
    // loaded machine: a try runs up to 10 s past rd.timeout, and a passphrase typed
    // first ends them without a word): the prompt outlives them.
    let typed = vec![(GAVE_UP.to_string(), prompt[0].1.clone())];
    // rd.timeout=40: the time before the prompt and after the answer counts, and
    // a loaded machine's guest can spend 15 s there.
    let console = boot_disk(&ns, "Tang server gone", typed, 40);
    if !booted(&console, &token) {
        failed.push("with no server, the passphrase typed: no root".into());
    }
    let asked = console.find(&prompt[0].0);
    let gave_up = console.find(GAVE_UP);
    match (asked, gave_up) {
        (Some(a), Some(g)) if a < g => {}
        _ => failed.push(format!(
            "with no server: the prompt (at {asked:?}) does not come before the tries end \
             at rd.timeout (at {gave_up:?})"
        )),
    }
    if console.contains("with Tang") {
        failed.push("with no server: the console says Tang opened the root".into());
    }
    if console.contains(crate::boot_storage::PASSPHRASE) {
        failed.push("with no server: the passphrase typed shows on the console".into());
    }
    assert!(failed.is_empty(), "{init}: {}", failed.join("; "));
}

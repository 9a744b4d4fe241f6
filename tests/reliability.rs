//! Hostile input, one test per defect of the reliability issue: outputs that are
//! not plain files, sources that change between planning and writing, images and
//! manifests built to exhaust memory, time or the stack, names the kernel cannot
//! represent, signals mid-build. Each says what it expects; book/src/reliability.md
//! has the table.
//!
//! Sources are changed "between planning and writing" deterministically: composer
//! runs under strace with the openat of one source delayed, and the test changes the
//! file during the delay (composer stats a source when it plans, and opens it only
//! to copy it). Peak memory is read with GNU time (`%M`).

use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, Scratch};

/// A sysroot with data files and a manifest that takes them as a tree.
fn sysroot(dir: &Path) -> PathBuf {
    let root = dir.join("sysroot");
    fs::create_dir_all(root.join("data")).unwrap();
    fs::write(root.join("data/small.bin"), b"small file\n").unwrap();
    fs::write(root.join("data/big.bin"), vec![7u8; 300_000]).unwrap();
    fs::write(dir.join("secret"), b"SECRET CONTENT\n").unwrap();
    fs::set_permissions(dir.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    let m = dir.join("m.toml");
    fs::write(&m, "root = \"sysroot\"\n\n[[tree]]\nsrc = \"/data\"\n").unwrap();
    m
}

fn build(manifest: &Path, out: &Path) -> Command {
    let mut cmd = support::composer();
    cmd.arg("build").arg(manifest).arg("-o").arg(out);
    cmd
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn fails_with(o: &Output, words: &[&str]) {
    let e = stderr(o);
    assert!(!o.status.success(), "expected a failure, got success:\n{e}");
    assert!(e.contains("composer: error:"), "{e}");
    for w in words {
        assert!(e.contains(w), "`{w}` missing from:\n{e}");
    }
}

/// Runs `cmd` with a deadline; None (and the process killed) when it passes.
fn run_within(cmd: &mut Command, limit: Duration) -> Option<Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(_status) = child.try_wait().unwrap() {
            return Some(child.wait_with_output().unwrap());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `cmd` run under GNU time: its output and its peak resident set in KiB.
fn with_peak_rss(cmd: &Command) -> Option<(Output, u64)> {
    let time = support::require_tool("time", "time")?;
    let dir = Scratch::new("rss");
    let report = dir.join("rss");
    let mut timed = Command::new(time);
    timed
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&report)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    if let Some(d) = cmd.get_current_dir() {
        timed.current_dir(d);
    }
    let out = support::run(&mut timed);
    let kib = fs::read_to_string(&report)
        .unwrap()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("time's %M");
    Some((out, kib))
}

const MIB: u64 = 1024;

// ---------------------------------------------------------------------------------------
// 1 and 13: what -o names
// ---------------------------------------------------------------------------------------

/// The three commands that write archives, each with an output path.
fn writers(dir: &Path, out: &Path) -> Vec<(&'static str, Command)> {
    let m = sysroot(dir);
    let list = dir.join("l.list");
    fs::write(
        &list,
        format!(
            "dir /d 0755 0 0\nfile /d/a {} 0644 0 0\n",
            dir.join("sysroot/data/small.bin").display()
        ),
    )
    .unwrap();
    let mut gic = support::composer();
    gic.arg("gen-init-cpio").arg("-o").arg(out).arg(&list);
    let mut bl = support::composer();
    bl.arg("build").arg("--list").arg(&list).arg("-o").arg(out);
    vec![
        ("build", build(&m, out)),
        ("gen-init-cpio", gic),
        ("build --list", bl),
    ]
}

#[test]
fn a_device_or_fifo_output_is_written_through_not_replaced() {
    if !support::require_root() {
        return;
    }
    let dir = Scratch::new("out-devices");
    let null = dir.join("null");
    let full = dir.join("full");
    for (p, minor) in [(&null, 3), (&full, 7)] {
        let ok = Command::new("mknod")
            .arg("-m666")
            .arg(p)
            .args(["c", "1", &minor.to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    for (what, mut cmd) in writers(&dir, &null) {
        let o = support::run(&mut cmd);
        assert!(o.status.success(), "{what} -o null: {}", stderr(&o));
        let m = fs::symlink_metadata(&null).unwrap();
        assert!(
            m.file_type().is_char_device(),
            "{what}: the device node was replaced"
        );
        assert_eq!(m.rdev(), fs::metadata("/dev/null").unwrap().rdev());
    }
    for (what, mut cmd) in writers(&dir, &full) {
        let o = support::run(&mut cmd);
        assert!(!o.status.success(), "{what} -o /dev/full exited 0");
        assert!(
            stderr(&o).contains("No space left"),
            "{what}: {}",
            stderr(&o)
        );
        assert!(fs::symlink_metadata(&full)
            .unwrap()
            .file_type()
            .is_char_device());
    }
}

#[test]
fn standard_output_and_fifos_receive_the_archive() {
    let dir = Scratch::new("out-streams");
    let m = sysroot(&dir);
    let file = dir.join("file.img");
    support::run_ok(build(&m, &file).arg("--no-sync"));
    let want = fs::read(&file).unwrap();
    // A link to standard output as /dev/stdout is (one of our own, so that a
    // composer that renames over it cannot harm the machine's), and the
    // descriptor itself, as >(cmd) passes one.
    let stdout = dir.join("stdout");
    std::os::unix::fs::symlink("/proc/self/fd/1", &stdout).unwrap();
    let o = support::run(build(&m, &stdout).arg("--no-sync"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        o.stdout == want,
        "a link to /proc/self/fd/1 got {} bytes",
        o.stdout.len()
    );
    assert!(fs::symlink_metadata(&stdout)
        .unwrap()
        .file_type()
        .is_symlink());
    let o = support::run(build(&m, Path::new("/proc/self/fd/1")).arg("--no-sync"));
    assert!(
        o.status.success() && o.stdout == want,
        "/proc/self/fd/1: {}",
        stderr(&o)
    );
    // A FIFO with a reader: the reader gets the archive, the FIFO stays.
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            fs::File::open(&fifo)
                .unwrap()
                .read_to_end(&mut got)
                .unwrap();
            got
        })
    };
    let o = support::run(build(&m, &fifo).arg("--no-sync"));
    assert!(o.status.success(), "{}", stderr(&o));
    let got = reader.join().unwrap();
    assert!(got == want, "the FIFO's reader got {} bytes", got.len());
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
}

#[test]
fn a_symlink_output_replaces_its_target_and_keeps_the_link() {
    let dir = Scratch::new("out-links");
    fs::create_dir(dir.join("boot")).unwrap();
    for (what, mut cmd) in writers(&dir, &dir.join("link.img")) {
        let real = dir.join("boot/real.img");
        fs::write(&real, b"old image").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o644)).unwrap();
        let _ = fs::remove_file(dir.join("link.img"));
        std::os::unix::fs::symlink("boot/real.img", dir.join("link.img")).unwrap();
        support::run_ok(&mut cmd);
        assert!(
            fs::symlink_metadata(dir.join("link.img"))
                .unwrap()
                .file_type()
                .is_symlink(),
            "{what}: the symlink was replaced"
        );
        let bytes = fs::read(&real).unwrap();
        assert!(
            bytes.starts_with(b"070701"),
            "{what}: the target was not written"
        );
        assert_eq!(
            fs::metadata(&real).unwrap().mode() & 0o7777,
            0o644,
            "{what}: the replaced image lost its mode"
        );
    }
    // A dangling link: the file it names is created.
    let _ = fs::remove_file(dir.join("link.img"));
    std::os::unix::fs::symlink("boot/new.img", dir.join("link.img")).unwrap();
    let (_, mut cmd) = writers(&dir, &dir.join("link.img")).remove(0);
    support::run_ok(&mut cmd);
    assert!(fs::read(dir.join("boot/new.img"))
        .unwrap()
        .starts_with(b"070701"));
}

#[test]
fn a_replaced_image_keeps_its_mode_and_owner_and_a_new_one_is_private() {
    let dir = Scratch::new("out-meta");
    let out = dir.join("initrd.img");
    let (_, mut cmd) = writers(&dir, &out).remove(0);
    support::run_ok(&mut cmd);
    assert_eq!(fs::metadata(&out).unwrap().mode() & 0o7777, 0o600);
    fs::set_permissions(&out, fs::Permissions::from_mode(0o644)).unwrap();
    let owner = support::is_root().then_some((1234, 4321));
    if let Some((u, g)) = owner {
        std::os::unix::fs::chown(&out, Some(u), Some(g)).unwrap();
    }
    let (_, mut cmd) = writers(&dir, &out).remove(0);
    support::run_ok(&mut cmd);
    let m = fs::metadata(&out).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o644, "the mode was lost");
    if let Some((u, g)) = owner {
        assert_eq!((m.uid(), m.gid()), (u, g), "the owner was lost");
    }
}

/// An image that holds a key file its crypttab names (or one of systemd's
/// /etc/cryptsetup-keys.d) is 0600 even over a file that was 0644, and the
/// build says which key it holds; the key's bytes are what the image holds,
/// the rest of the image stays readable only by its owner.
#[test]
fn an_image_holding_a_key_file_is_private_even_over_a_wider_file() {
    let dir = Scratch::new("out-keys");
    let out = dir.join("initrd.img");
    fs::write(
        dir.join("crypttab"),
        "# test\nvol UUID=0a1b2c3d-4e5f-6789-0a1b-2c3d4e5f6789 /etc/keys/vol.key luks\n",
    )
    .unwrap();
    fs::write(dir.join("vol.key"), "0123456789abcdef").unwrap();
    let manifest = |with_key: bool, keys_d: bool| {
        let mut m = format!(
            "[[file]]\nsrc = {}\ndst = \"/etc/crypttab\"\n",
            support::toml_str(&dir.join("crypttab").to_string_lossy())
        );
        if with_key {
            m += &format!(
                "[[file]]\nsrc = {}\ndst = \"/etc/keys/vol.key\"\nmode = \"0400\"\n",
                support::toml_str(&dir.join("vol.key").to_string_lossy())
            );
        }
        if keys_d {
            m += &format!(
                "[[file]]\nsrc = {}\ndst = \"/etc/cryptsetup-keys.d/vol.key\"\n",
                support::toml_str(&dir.join("vol.key").to_string_lossy())
            );
        }
        let p = dir.join("m.toml");
        fs::write(&p, m).unwrap();
        p
    };
    let build = |m: &Path| {
        support::run_ok(
            support::composer()
                .arg("build")
                .arg(m)
                .arg("-o")
                .arg(&out)
                .arg("--no-sync"),
        )
    };
    for (with_key, keys_d, named) in [
        (
            true,
            false,
            "/etc/keys/vol.key (/etc/crypttab line 2 (vol))",
        ),
        (false, true, "/etc/cryptsetup-keys.d/vol.key"),
    ] {
        fs::write(&out, b"old").unwrap();
        fs::set_permissions(&out, fs::Permissions::from_mode(0o644)).unwrap();
        let r = build(&manifest(with_key, keys_d));
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(
            err.contains(&format!("the image holds the key file {named}")),
            "no warning naming {named}:\n{err}"
        );
        assert_eq!(
            fs::metadata(&out).unwrap().mode() & 0o7777,
            0o600,
            "an image holding {named} is not 0600"
        );
    }
    // The crypttab alone (the key left out): no warning, the mode is kept.
    fs::set_permissions(&out, fs::Permissions::from_mode(0o644)).unwrap();
    let r = build(&manifest(false, false));
    assert!(!String::from_utf8_lossy(&r.stderr).contains("key file"));
    assert_eq!(fs::metadata(&out).unwrap().mode() & 0o7777, 0o644);
}

/// Builds `manifest` (with `args`) over `out`, made a 0644 file first; gives the
/// output's mode afterwards and the build's standard error.
fn build_over_0644(out: &Path, manifest: &Path, args: &[&str]) -> (u32, String) {
    fs::write(out, b"the image initramfs-tools left").unwrap();
    fs::set_permissions(out, fs::Permissions::from_mode(0o644)).unwrap();
    let r = support::run_ok(
        support::composer()
            .arg("build")
            .arg(manifest)
            .arg("-o")
            .arg(out)
            .arg("--no-sync")
            .args(args),
    );
    let mode = fs::metadata(out).unwrap().mode() & 0o7777;
    (mode, String::from_utf8_lossy(&r.stderr).into_owned())
}

/// An image of the ssh-unlock profile holds the root's SSH host private keys: built
/// over the 0644 image initramfs-tools leaves in /boot, it is 0600 (whoever could
/// read it could pose as the machine), and the build names each key and the
/// profile's rule that put it there.
#[test]
fn an_ssh_unlock_image_is_private_even_over_a_wider_file() {
    for (tool, pkg) in [
        ("ssh-keygen", "openssh-client"),
        ("dropbear", "dropbear-bin"),
        ("dropbearconvert", "dropbear-bin"),
    ] {
        if support::require_tool(tool, pkg).is_none() {
            return;
        }
    }
    let dir = Scratch::new("out-ssh-unlock");
    let keys = dir.join("hostkeys");
    fs::create_dir_all(&keys).unwrap();
    for (kind, file) in [
        ("ed25519", keys.join("ssh_host_ed25519_key")),
        ("ecdsa", keys.join("ssh_host_ecdsa_key")),
        ("ed25519", dir.join("admin")),
    ] {
        support::run_ok(
            Command::new("ssh-keygen")
                .args(["-q", "-t", kind, "-N", "", "-C", "composer-test", "-f"])
                .arg(&file),
        );
    }
    // The profile's network modules are optional: an empty module tree will do.
    let kmod = dir.join("kmod");
    fs::create_dir_all(&kmod).unwrap();
    for f in ["modules.dep", "modules.alias", "modules.builtin"] {
        fs::write(kmod.join(f), b"").unwrap();
    }
    let manifest = dir.join("ssh.toml");
    fs::write(
        &manifest,
        format!(
            "include = [\"ssh-unlock\"]\n\n[vars]\nssh_authorized_keys = {}\nssh_host_keys = {}\n",
            support::toml_str(&dir.join("admin.pub").to_string_lossy()),
            support::toml_str(&keys.to_string_lossy()),
        ),
    )
    .unwrap();
    let out = dir.join("initrd.img");
    let kmod = kmod.to_string_lossy().into_owned();
    let args = ["--kver", "6.1.0-test", "--kmoddir", kmod.as_str()];
    let (mode, err) = build_over_0644(&out, &manifest, &args);
    assert_eq!(
        mode, 0o600,
        "an image holding SSH host keys is {mode:o}:\n{err}"
    );
    for key in ["ssh_host_ed25519_key", "ssh_host_ecdsa_key"] {
        let named = format!("the image holds the SSH host private key /etc/composer/ssh/{key}");
        let line = err.lines().find(|l| l.contains(&named));
        assert!(
            line.is_some_and(|l| l.contains("profile ssh-unlock, line ")),
            "no warning naming {key} and the profile's rule:\n{err}"
        );
    }
    // The authorized keys are public: no warning of their own.
    assert!(!err.contains("authorized_keys"), "{err}");
    // The keys the image holds are the root's.
    assert_eq!(
        support::image_bytes(&out, "etc/composer/ssh/ssh_host_ed25519_key"),
        fs::read(keys.join("ssh_host_ed25519_key")).unwrap()
    );
}

/// A file, a tree or a glob marked `secret = true` makes the image private, as an
/// SSH host key does by its name; the build names the secret and the rule. The same
/// image without a secret, built over a 0644 file, keeps 0644.
#[test]
fn an_image_holding_a_marked_secret_is_private_and_one_without_keeps_its_mode() {
    let dir = Scratch::new("out-secret");
    let root = dir.join("root");
    fs::create_dir_all(root.join("etc/wifi")).unwrap();
    fs::write(root.join("etc/wifi.psk"), b"correct horse battery staple\n").unwrap();
    fs::write(root.join("etc/wifi/home.psk"), b"psk=hunter2\n").unwrap();
    fs::write(root.join("etc/motd"), b"hello\n").unwrap();
    fs::write(root.join("etc/ssh_host_rsa_key"), b"not really a key\n").unwrap();
    let out = dir.join("initrd.img");
    let manifest = |rule: &str| {
        let m = dir.join("m.toml");
        fs::write(
            &m,
            format!(
                "root = {}\n\n[[file]]\nsrc = \"/etc/motd\"\n\n{rule}",
                support::toml_str(&root.to_string_lossy())
            ),
        )
        .unwrap();
        m
    };
    for (rule, named) in [
        (
            "[[file]]\nsrc = \"/etc/wifi.psk\"\nsecret = true\n",
            "the image holds the secret /etc/wifi.psk (marked secret = true)",
        ),
        (
            "[[tree]]\nsrc = \"/etc/wifi\"\nsecret = true\n",
            "the image holds the secret /etc/wifi/home.psk (marked secret = true)",
        ),
        (
            "[[glob]]\npatterns = [\"/etc/*.psk\"]\nsecret = true\n",
            "the image holds the secret /etc/wifi.psk (marked secret = true)",
        ),
        (
            "[[file]]\nsrc = \"/etc/ssh_host_rsa_key\"\ndst = \"/etc/dropbear/ssh_host_rsa_key\"\n",
            "the image holds the SSH host private key /etc/dropbear/ssh_host_rsa_key \
             (an SSH server's host key, by its name)",
        ),
    ] {
        let (mode, err) = build_over_0644(&out, &manifest(rule), &[]);
        assert_eq!(mode, 0o600, "{rule}: the image is {mode:o}:\n{err}");
        let line = err.lines().find(|l| l.contains(named));
        assert!(
            line.is_some_and(|l| l.contains("m.toml:6:1:") && l.ends_with("it is written 0600")),
            "{rule}: no warning naming the secret and its rule ({named}):\n{err}"
        );
        // The tree's directory is no secret.
        assert!(!err.contains("secret /etc/wifi "), "{err}");
    }
    // The same files without `secret`: no warning, and the file's mode is kept.
    for rule in [
        "[[file]]\nsrc = \"/etc/wifi.psk\"\n",
        "[[tree]]\nsrc = \"/etc/wifi\"\nsecret = false\n",
    ] {
        let (mode, err) = build_over_0644(&out, &manifest(rule), &[]);
        assert_eq!(
            mode, 0o644,
            "{rule}: an image without secrets is {mode:o}:\n{err}"
        );
        assert!(!err.contains("the image holds"), "{rule}:\n{err}");
    }
}

#[test]
fn sockets_and_block_devices_are_refused_as_outputs() {
    let dir = Scratch::new("out-refused");
    let sock = dir.join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    for (what, mut cmd) in writers(&dir, &sock) {
        let o = support::run(&mut cmd);
        fails_with(&o, &["is a socket"]);
        assert!(
            fs::symlink_metadata(&sock).unwrap().file_type().is_socket(),
            "{what}"
        );
    }
    if support::is_root() {
        let blk = dir.join("blk");
        assert!(Command::new("mknod")
            .arg(&blk)
            .args(["b", "7", "200"])
            .status()
            .unwrap()
            .success());
        let (_, mut cmd) = writers(&dir, &blk).remove(0);
        fails_with(&support::run(&mut cmd), &["is a block device"]);
    }
}

// ---------------------------------------------------------------------------------------
// 2, 8, 9, 14: sources that change between planning and writing
// ---------------------------------------------------------------------------------------

/// Builds `manifest` with the open of `path` held back for a second and a half,
/// running `change` during the hold. None when strace is missing.
fn build_while_changing(
    manifest: &Path,
    out: &Path,
    path: &Path,
    change: impl FnOnce(),
) -> Option<Output> {
    let strace = support::require_tool("strace", "strace")?;
    let mut cmd = Command::new(strace);
    cmd.arg("-f")
        .arg("-qq")
        .arg("-o")
        .arg("/dev/null")
        .arg("-P")
        .arg(path)
        .arg("-e")
        .arg("inject=open,openat:delay_enter=1500000")
        .arg(support::composer_bin())
        .arg("build")
        .arg(manifest)
        .arg("-o")
        .arg(out)
        .arg("--no-sync")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A group of its own: a hang is ended with strace and composer together.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd.spawn().unwrap();
    // The temporary output appears once planning is over; the writer opens
    // the sources next, and the one held back waits a second and a half.
    wait_for_temporary(out.parent().unwrap());
    std::thread::sleep(Duration::from_millis(200));
    change();
    let deadline = Duration::from_secs(60);
    let start = Instant::now();
    let mut child = child;
    loop {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        if start.elapsed() > deadline {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let out = child.wait_with_output().unwrap();
            panic!("the build hangs: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn temporaries(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".composer-"))
        .collect()
}

fn wait_for_temporary(dir: &Path) {
    let start = Instant::now();
    while temporaries(dir).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no temporary file appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn no_temporaries(dir: &Path) {
    let left = temporaries(dir);
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn a_source_swapped_for_a_symlink_out_of_the_root_is_an_error() {
    let dir = Scratch::new("swap-symlink");
    let m = sysroot(&dir);
    let small = dir.join("sysroot/data/small.bin");
    let out = dir.join("out.img");
    let secret = dir.join("secret");
    let Some(o) = build_while_changing(&m, &out, &small, || {
        fs::remove_file(&small).unwrap();
        std::os::unix::fs::symlink(&secret, &small).unwrap();
    }) else {
        return;
    };
    fails_with(&o, &["small.bin", "symbolic link", "m.toml:3:1"]);
    assert!(!out.exists(), "an image was written");
    no_temporaries(&dir);
}

/// A symlink of the root whose target the root does not have: looked up
/// inside the root it leads nowhere; the host would follow it out of the
/// root (absolute, or climbing with `..`) to a file that exists there.
#[test]
fn links_to_what_the_root_lacks_are_not_followed_out_of_it() {
    let dir = Scratch::new("dangling-in-root");
    sysroot(&dir);
    let root = dir.join("sysroot");
    let secret = dir.join("secret");
    std::os::unix::fs::symlink(&secret, root.join("data/abs")).unwrap();
    std::os::unix::fs::symlink("../../../../../../../../secret", root.join("data/up")).unwrap();
    // A directory link: what is under it is looked up through it.
    std::os::unix::fs::symlink(&*dir, root.join("outside")).unwrap();
    let out = dir.join("out.img");
    for (rule, src, at) in [
        ("file", "/data/abs", "m2.toml:4:7"),
        ("file", "/data/up", "m2.toml:4:7"),
        ("file", "/outside/secret", "m2.toml:4:7"),
        ("tree", "/outside", "m2.toml:4:7"),
    ] {
        let m = dir.join("m2.toml");
        fs::write(
            &m,
            format!("root = \"sysroot\"\n\n[[{rule}]]\nsrc = \"{src}\"\ndst = \"/x\"\n"),
        )
        .unwrap();
        let o = support::run(&mut build(&m, &out));
        fails_with(&o, &[src, at]);
        assert!(!out.exists(), "{rule} {src}: an image was written");
    }
    // Optional, they are left out, as what is missing is.
    let m = dir.join("m3.toml");
    fs::write(
        &m,
        "root = \"sysroot\"\n\n[[file]]\nsrc = \"/data/abs\"\noptional = true\n\n\
         [[file]]\nsrc = \"/data/small.bin\"\n",
    )
    .unwrap();
    support::run_ok(&mut build(&m, &out));
    let image = fs::read(&out).unwrap();
    assert!(
        !image.windows(14).any(|w| w == b"SECRET CONTENT"),
        "the secret is in the image"
    );
}

#[test]
fn a_source_swapped_for_a_fifo_is_an_error_not_a_hang() {
    let dir = Scratch::new("swap-fifo");
    let m = sysroot(&dir);
    let small = dir.join("sysroot/data/small.bin");
    let out = dir.join("out.img");
    let Some(o) = build_while_changing(&m, &out, &small, || {
        fs::remove_file(&small).unwrap();
        assert!(Command::new("mkfifo")
            .arg(&small)
            .status()
            .unwrap()
            .success());
    }) else {
        return;
    };
    fails_with(&o, &["small.bin", "named pipe"]);
    no_temporaries(&dir);
}

#[test]
fn a_source_that_grows_or_turns_into_a_directory_is_an_error() {
    let dir = Scratch::new("swap-grow");
    let m = sysroot(&dir);
    let big = dir.join("sysroot/data/big.bin");
    let out = dir.join("out.img");
    let Some(o) = build_while_changing(&m, &out, &big, || {
        let mut f = fs::OpenOptions::new().append(true).open(&big).unwrap();
        std::io::Write::write_all(&mut f, &[1u8; 5000]).unwrap();
    }) else {
        return;
    };
    fails_with(&o, &["big.bin", "changed size", "300000", "305000"]);
    let Some(o) = build_while_changing(&m, &out, &big, || {
        fs::remove_file(&big).unwrap();
        fs::create_dir(&big).unwrap();
    }) else {
        return;
    };
    // The error is about the source, at its manifest line, not about the output.
    fails_with(&o, &["big.bin", "is now a directory", "m.toml:3:1"]);
    assert!(!stderr(&o).contains("out.img:"), "{}", stderr(&o));
}

// ---------------------------------------------------------------------------------------
// 3: images that decompress to much more than they are
// ---------------------------------------------------------------------------------------

/// A reader of `len` zero bytes.
struct Zeros(u64);

impl Read for Zeros {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.0) as usize;
        buf[..n].fill(0);
        self.0 -= n as u64;
        Ok(n)
    }
}

/// A newc header (nlink 1, owner 0, mtime 0), the name and its padding.
fn header(ino: u32, mode: u32, size: u32, name: &str) -> Vec<u8> {
    let fields = [
        ino,
        mode,
        0,
        0,
        1,
        0,
        size,
        0,
        0,
        0,
        0,
        name.len() as u32 + 1,
        0,
    ];
    let mut h = b"070701".to_vec();
    for f in fields {
        h.extend_from_slice(format!("{f:08X}").as_bytes());
    }
    h.extend_from_slice(name.as_bytes());
    h.push(0);
    while !h.len().is_multiple_of(4) {
        h.push(0);
    }
    h
}

/// A compressed image of `files` regular files of `size` zero bytes each.
fn bomb(method: composer::compress::Compression, files: u32, size: u32) -> Vec<u8> {
    let mut parts: Vec<Box<dyn Read>> = Vec::new();
    for i in 0..files {
        let head = header(i + 1, 0o100644, size, &format!("zero{i}"));
        parts.push(Box::new(std::io::Cursor::new(head)));
        parts.push(Box::new(Zeros(size as u64 + (4 - size as u64 % 4) % 4)));
    }
    parts.push(Box::new(std::io::Cursor::new(header(
        0,
        0,
        0,
        "TRAILER!!!",
    ))));
    let mut input: Box<dyn Read> = Box::new(std::io::empty());
    for p in parts {
        input = Box::new(input.chain(p));
    }
    let mut out = Vec::new();
    let opts = composer::compress::EncodeOptions {
        method,
        level: Some(1),
        threads: 2,
    };
    composer::compress::encode(&opts, &mut input, &mut out).unwrap();
    out
}

/// The shared bombs, built once (a 4 GiB expansion takes a few seconds).
fn bomb_file(
    name: &str,
    method: composer::compress::Compression,
    files: u32,
    size: u32,
) -> PathBuf {
    support::cached_asset(&format!("bomb-v1-{name}"), |tmp| {
        fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
        fs::write(tmp.join("image"), bomb(method, files, size)).map_err(|e| e.to_string())
    })
    .expect("bomb")
    .join("image")
}

#[test]
fn readers_stream_decompression_bombs_in_bounded_memory() {
    use composer::compress::Compression;
    // 1 GiB in one file (zstd), 4 GiB in four (zstd), 1 GiB in gzip.
    let one = bomb_file("zstd-1g", Compression::Zstd, 1, (1 << 30) - 16);
    let four = bomb_file("zstd-4g", Compression::Zstd, 4, (1 << 30) - 16);
    let gz = bomb_file("gzip-1g", Compression::Gzip, 1, (1 << 30) - 16);
    let dir = Scratch::new("bombs");
    for (image, what) in [
        (&one, "zstd 1 GiB"),
        (&four, "zstd 4 GiB"),
        (&gz, "gzip 1 GiB"),
    ] {
        let size = fs::metadata(image).unwrap().len();
        assert!(size < 16 << 20, "{what}: the bomb is {size} bytes");
        let mut verify = support::composer();
        verify.arg("verify").arg(image);
        let Some((o, kib)) = with_peak_rss(&verify) else {
            return;
        };
        assert!(o.status.success(), "{what}: verify: {}", stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("ok:"), "{what}");
        eprintln!("{what}: verify peak RSS {kib} KiB for {size} bytes");
        assert!(kib < 64 * MIB, "{what}: verify took {kib} KiB");
        let mut inspect = support::composer();
        inspect.arg("inspect").arg("-l").arg(image);
        let (o, kib) = with_peak_rss(&inspect).unwrap();
        assert!(o.status.success());
        eprintln!("{what}: inspect peak RSS {kib} KiB");
        assert!(kib < 64 * MIB, "{what}: inspect took {kib} KiB");
    }
    // diff digests every byte (twice): the 1 GiB one.
    let mut diff = support::composer();
    diff.arg("diff").arg(&one).arg(&one);
    let (o, kib) = with_peak_rss(&diff).unwrap();
    assert!(o.status.success(), "diff: {}", stderr(&o));
    eprintln!("zstd 1 GiB: diff peak RSS {kib} KiB");
    assert!(kib < 64 * MIB, "diff took {kib} KiB");
    // Extract writes the gigabyte out, in bounded memory too.
    let target = dir.join("x");
    let mut extract = support::composer();
    extract.arg("extract").arg(&one).arg("-C").arg(&target);
    let (o, kib) = with_peak_rss(&extract).unwrap();
    assert!(o.status.success(), "extract: {}", stderr(&o));
    eprintln!("zstd 1 GiB: extract peak RSS {kib} KiB");
    assert!(kib < 64 * MIB, "extract took {kib} KiB");
    assert_eq!(
        fs::metadata(target.join("zero0")).unwrap().len(),
        (1 << 30) - 16
    );
}

// ---------------------------------------------------------------------------------------
// 4, 5, 6, 7: manifests built to exhaust memory, time or the stack
// ---------------------------------------------------------------------------------------

fn check(manifest: &Path) -> Command {
    let mut cmd = support::composer();
    cmd.arg("check").arg(manifest);
    cmd
}

#[test]
fn a_yaml_alias_bomb_is_refused_at_its_alias() {
    let dir = Scratch::new("alias-bomb");
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        let list = [prev.as_str(); 9].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{list}]\n"));
    }
    let m = dir.join("bomb.yaml");
    fs::write(&m, &text).unwrap();
    let Some((o, kib)) = with_peak_rss(&check(&m)) else {
        return;
    };
    fails_with(&o, &["bomb.yaml:", "aliases repeat more than"]);
    let empty = dir.join("empty.yaml");
    fs::write(&empty, "{}\n").unwrap();
    let (_, base) = with_peak_rss(&check(&empty)).unwrap();
    eprintln!(
        "alias bomb of {} bytes: {kib} KiB (an empty manifest: {base} KiB)",
        text.len()
    );
    // Memory: what an empty manifest takes, plus 4x the manifest and some slack.
    assert!(
        kib <= base + 4 * text.len() as u64 / 1024 + 4 * MIB,
        "{kib} KiB"
    );
}

/// `n` entries, half directories and half symlinks (no sources to read),
/// one table or mapping each, as `benches/manifest-scale.sh` writes them.
fn many_entries(n: usize, yaml: bool) -> String {
    let half = n / 2;
    let mut t = String::new();
    if yaml {
        t.push_str("image:\n  order: manifest\n  parents: false\ndir:\n  - path: /d\n");
        for i in 0..half - 1 {
            t.push_str(&format!("  - path: /d/{i}\n    mode: \"0755\"\n"));
        }
        t.push_str("symlink:\n");
        for i in 0..half {
            t.push_str(&format!("  - path: /d/l{i}\n    target: \"{i}\"\n"));
        }
    } else {
        t.push_str("[image]\norder = \"manifest\"\nparents = false\n\n[[dir]]\npath = \"/d\"\n\n");
        for i in 0..half - 1 {
            t.push_str(&format!("[[dir]]\npath = \"/d/{i}\"\nmode = \"0755\"\n\n"));
        }
        for i in 0..half {
            t.push_str(&format!(
                "[[symlink]]\npath = \"/d/l{i}\"\ntarget = \"{i}\"\n\n"
            ));
        }
    }
    t
}

/// The median peak RSS (KiB) of three runs of `cmd`, each of which must
/// pass `ok`: one run can be measured high by the pages the kernel happens
/// to account.
fn median_rss(cmd: &Command, ok: impl Fn(&Output)) -> Option<u64> {
    let mut peaks = Vec::new();
    for _ in 0..3 {
        let (o, kib) = with_peak_rss(cmd)?;
        ok(&o);
        peaks.push(kib);
    }
    peaks.sort_unstable();
    Some(peaks[1])
}

/// [`median_rss`] of `check` of `manifest`, which must find `entries`.
fn check_rss(manifest: &Path, entries: usize) -> Option<u64> {
    median_rss(&check(manifest), |o| {
        let name = manifest.display();
        assert!(o.status.success(), "{name}: {}", stderr(o));
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(
            said.contains(&format!("ok, {entries} entries")),
            "{name}: {said}"
        );
    })
}

/// A gen_init_cpio list of `files` small files in a tree of long paths under
/// `dir`, as `usr/gen_initramfs.sh` lists a module tree.
fn file_list(dir: &Path, files: usize) -> String {
    let mut list = String::new();
    let base = "lib/modules/6.1.0-99-amd64/kernel/drivers";
    let mut made = std::collections::BTreeSet::new();
    for i in 0..files {
        let sub = format!("{base}/subsystem-{:02}/driver-family-{:02}", i % 17, i % 41);
        let d = dir.join(&sub);
        if made.insert(sub.clone()) {
            fs::create_dir_all(&d).unwrap();
            let mut p = String::new();
            for c in sub.split('/') {
                p.push('/');
                p.push_str(c);
                if made.insert(p.clone()) {
                    list.push_str(&format!("dir {p} 0755 0 0\n"));
                }
            }
        }
        let f = d.join(format!("module-number-{i}.ko"));
        fs::write(&f, b"x").unwrap();
        list.push_str(&format!(
            "file /{sub}/module-number-{i}.ko {} 0644 0 0\n",
            f.display()
        ));
    }
    list
}

#[test]
fn large_manifests_load_in_memory_at_most_4x_their_size() {
    let dir = Scratch::new("manifest-memory");
    // What memory may grow by, over a manifest of the same format with one
    // entry, per byte of manifest: issue #12's bound. Measured on main in a
    // release build: `check` TOML 2.8x, YAML 3.1x, the imported tree 3.1x;
    // `build` TOML 3.0x, YAML 3.6x; a debug build about the same.
    let bound = 4;
    let mut cases = Vec::new();
    for yaml in [true, false] {
        let name = if yaml { "m.yaml" } else { "m.toml" };
        let m = dir.join(name);
        fs::write(&m, many_entries(50_000, yaml)).unwrap();
        let one = dir.join(format!("one.{}", if yaml { "yaml" } else { "toml" }));
        fs::write(&one, many_entries(2, yaml)).unwrap();
        cases.push((m, 50_000, one, 2));
    }
    // A manifest as import-list makes it from a module tree's list: a table
    // of source, destination and mode per file, long paths.
    let files = 3_000;
    let mut imported = Vec::new();
    for (n, files) in [("imported", files), ("imported-one", 1)] {
        let text = file_list(&dir.join(n), files);
        let list = dir.join(format!("{n}.list"));
        fs::write(&list, &text).unwrap();
        let m = dir.join(format!("{n}.toml"));
        let mut cmd = support::composer();
        cmd.arg("import-list").arg(&list).arg("-o").arg(&m);
        support::run_ok(&mut cmd);
        imported.push((m, text.lines().count()));
    }
    let [(m, n), (one, n_one)] = <[_; 2]>::try_from(imported).unwrap();
    cases.push((m, n, one, n_one));
    // `build` also holds the layout, 24 bytes a record: the same bound. Both
    // builds carry a 2 MiB file, whose data passes through the writer's
    // 1 MiB buffer: a fixed cost of any build with data, which the 50,000
    // tiny entries alone would fill with headers and a one-entry image
    // would not (it was 12x, then 6.5x, with the buffer counted).
    fs::write(dir.join("big.bin"), vec![7u8; 2 << 20]).unwrap();
    let build = |m: &Path| {
        let mut cmd = support::composer();
        cmd.args(["build", "-q", "--no-sync"])
            .arg(m)
            .arg("-o")
            .arg(dir.join("out.img"));
        cmd
    };
    for (m, _, one, _) in &cases[..2] {
        let with_file = |m: &Path| {
            let yaml = m.extension().is_some_and(|e| e == "yaml");
            let mut text = fs::read_to_string(m).unwrap();
            text.push_str(if yaml {
                "file:\n  - src: big.bin\n    dst: /big.bin\n"
            } else {
                "[[file]]\nsrc = \"big.bin\"\ndst = \"/big.bin\"\n"
            });
            let name = m.file_name().unwrap().to_string_lossy();
            let to = dir.join(format!("file-{name}"));
            fs::write(&to, text).unwrap();
            to
        };
        let (m, one) = (with_file(m), with_file(one));
        let built = |o: &Output| assert!(o.status.success(), "{}", stderr(o));
        let Some(base) = median_rss(&build(&one), built) else {
            return;
        };
        let kib = median_rss(&build(&m), built).unwrap();
        let size = fs::metadata(&m).unwrap().len();
        let grew = kib.saturating_sub(base);
        let ratio = (grew * 1024) as f64 / size as f64;
        eprintln!(
            "build of {}: {size} bytes, peak RSS {kib} KiB, {grew} KiB over one entry ({ratio:.2}x)",
            m.display()
        );
        assert!(
            grew * 1024 <= bound * size,
            "build of {}: {grew} KiB for {size} bytes ({ratio:.2}x, at most {bound}x)",
            m.display()
        );
    }
    for (m, n, one, n_one) in cases {
        let Some(base) = check_rss(&one, n_one) else {
            return;
        };
        let kib = check_rss(&m, n).unwrap();
        let size = fs::metadata(&m).unwrap().len();
        let grew = kib.saturating_sub(base);
        let ratio = (grew * 1024) as f64 / size as f64;
        eprintln!(
            "{}: {size} bytes, peak RSS {kib} KiB, {grew} KiB over a manifest of one entry ({ratio:.2}x)",
            m.display()
        );
        assert!(
            grew * 1024 <= bound * size,
            "{}: {grew} KiB for {size} bytes ({ratio:.2}x, at most {bound}x)",
            m.display()
        );
    }
}

#[test]
fn manifests_must_be_regular_files_of_bounded_size() {
    let dir = Scratch::new("manifest-files");
    let zero = dir.join("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let m = dir.join("m.toml");
    fs::write(&m, "include = [\"zero.toml\"]\n").unwrap();
    let o = run_within(&mut check(&m), Duration::from_secs(60)).expect("check hangs");
    fails_with(&o, &["zero.toml", "a device, not a regular file"]);
    let o = run_within(&mut check(Path::new("/dev/zero")), Duration::from_secs(60)).unwrap();
    fails_with(&o, &["/dev/zero", "a device"]);
    let fifo = dir.join("fifo.toml");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    fs::write(&m, "include = [\"fifo.toml\"]\n").unwrap();
    let o =
        run_within(&mut check(&m), Duration::from_secs(60)).expect("an include of a FIFO hangs");
    fails_with(&o, &["fifo.toml", "a named pipe"]);
    // Larger than 64 MiB (sparse: it costs nothing).
    let huge = dir.join("huge.toml");
    fs::File::create(&huge).unwrap().set_len(65 << 20).unwrap();
    let o = run_within(&mut check(&huge), Duration::from_secs(60)).unwrap();
    fails_with(&o, &["huge.toml", "larger than 64 MiB"]);
    // The same for lists.
    let mut list = support::composer();
    list.arg("gen-init-cpio").arg("/dev/zero");
    let o = run_within(&mut list, Duration::from_secs(60)).expect("a list of /dev/zero hangs");
    fails_with(&o, &["/dev/zero", "a device"]);
}

#[test]
fn a_diamond_of_includes_loads_each_file_once() {
    let dir = Scratch::new("diamond");
    let levels = 30;
    for l in 0..levels {
        for side in ["a", "b"] {
            let text = if l + 1 == levels {
                format!("[[dir]]\npath = \"/l{l}{side}\"\n")
            } else {
                format!(
                    "include = [\"{}a.toml\", \"{}b.toml\"]\n\n[[dir]]\npath = \"/l{l}{side}\"\n",
                    l + 1,
                    l + 1
                )
            };
            fs::write(dir.join(format!("{l}{side}.toml")), text).unwrap();
        }
    }
    // 2^30 loads before; one per file now. A minute is thousands of times
    // what it takes.
    let o = run_within(&mut check(&dir.join("0a.toml")), Duration::from_secs(60))
        .expect("loading a diamond of includes does not end");
    assert!(o.status.success(), "{}", stderr(&o));
    // Every directory once, both sides of every level, and the root's parents.
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("ok, {} entries", 2 * levels - 1)),
        "{out}"
    );
}

#[test]
fn deep_nesting_is_a_located_error_not_a_crash() {
    let dir = Scratch::new("deep");
    let block = dir.join("block.yaml");
    fs::write(&block, format!("{}x\n", "- ".repeat(30000))).unwrap();
    let flow = dir.join("flow.yaml");
    fs::write(
        &flow,
        format!("{}{}\n", "[".repeat(30000), "]".repeat(30000)),
    )
    .unwrap();
    let toml = dir.join("deep.toml");
    fs::write(
        &toml,
        format!("a = {}{}\n", "[".repeat(30000), "]".repeat(30000)),
    )
    .unwrap();
    for m in [&block, &flow, &toml] {
        let o = run_within(&mut check(m), Duration::from_secs(60)).unwrap();
        assert_eq!(o.status.code(), Some(2), "{}: {}", m.display(), stderr(&o));
        fails_with(&o, &["recursion"]);
        let name = m.file_name().unwrap().to_string_lossy();
        assert!(stderr(&o).contains(&format!("{name}:1:")), "{}", stderr(&o));
    }
}

// ---------------------------------------------------------------------------------------
// 10: names the kernel cannot represent
// ---------------------------------------------------------------------------------------

#[test]
fn nul_bytes_in_paths_and_targets_are_refused_where_they_are() {
    let dir = Scratch::new("nul");
    fs::write(dir.join("init"), b"#!/bin/sh\n").unwrap();
    let m = dir.join("m.toml");
    fs::write(
        &m,
        "[[file]]\nsrc = \"init\"\ndst = \"/init\"\n\n[[file]]\nsrc = \"init\"\ndst = \"/init\\u0000x\"\n",
    )
    .unwrap();
    let o = support::run(&mut check(&m));
    fails_with(&o, &["m.toml:7:7", "NUL byte"]);
    fs::write(&m, "[[symlink]]\npath = \"/a\"\ntarget = \"b\\u0000c\"\n").unwrap();
    fails_with(&support::run(&mut check(&m)), &["m.toml:3:10", "NUL byte"]);
    let y = dir.join("m.yaml");
    fs::write(&y, "dir:\n  - path: \"/a\\0b\"\n").unwrap();
    fails_with(&support::run(&mut check(&y)), &["m.yaml:2:", "NUL byte"]);
}

// ---------------------------------------------------------------------------------------
// 11: signals mid-build, and what a killed build left behind
// ---------------------------------------------------------------------------------------

#[test]
fn signals_remove_the_temporary_file_and_stale_ones_are_cleaned() {
    let Some(strace) = support::require_tool("strace", "strace") else {
        return;
    };
    let dir = Scratch::new("signals");
    let m = sysroot(&dir);
    let big = dir.join("sysroot/data/big.bin");
    for (sig, name) in [(2, "INT"), (15, "TERM"), (1, "HUP")] {
        let out = dir.join(format!("out-{name}.img"));
        let mut child = Command::new(&strace)
            .args(["-f", "-qq", "-o", "/dev/null", "-P"])
            .arg(&big)
            .args(["-e", "inject=open,openat:delay_enter=3000000"])
            .arg(support::composer_bin())
            .arg("build")
            .arg(&m)
            .arg("-o")
            .arg(&out)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait for the temporary file, then signal composer (strace's child).
        wait_for_temporary(&dir);
        let pid = fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id()))
            .unwrap()
            .split_whitespace()
            .next()
            .expect("composer runs under strace")
            .to_string();
        assert!(Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(&pid)
            .status()
            .unwrap()
            .success());
        let _ = child.wait();
        no_temporaries(&dir);
        assert!(!out.exists(), "SIG{name}: an image was written");
    }
    // What SIGKILL leaves, the next build removes (the PID is gone); a live
    // process's temporary file stays.
    let dead = dir.join(".composer-4000000000-abcdef.tmp");
    let live = dir.join(format!(".composer-{}-abcdef.tmp", std::process::id()));
    fs::write(&dead, b"left by a killed build").unwrap();
    fs::write(&live, b"being written").unwrap();
    support::run_ok(&mut build(&m, &dir.join("next.img")));
    assert!(!dead.exists(), "a stale temporary file stayed");
    assert!(live.exists(), "a live build's temporary file was removed");
    fs::remove_file(&live).unwrap();
}

// ---------------------------------------------------------------------------------------
// 12: deep paths in verify and extract
// ---------------------------------------------------------------------------------------

#[test]
fn verify_and_extract_take_time_linear_in_the_depth() {
    let dir = Scratch::new("deep-paths");
    // d/d/d/... 2,000 deep (names up to 4,001 bytes, as deep as PATH_MAX
    // lets a one-letter chain go), a file in every directory and ten in each
    // of the deeper half: 40 MB of names. Linear work reads them in seconds;
    // work that grows with the square of the depth per entry takes many
    // minutes.
    let depth = 2000;
    let mut img = Vec::new();
    let mut ino = 1;
    let mut push = |img: &mut Vec<u8>, name: &str, mode: u32, data: &[u8]| {
        img.extend_from_slice(&header(ino, mode, data.len() as u32, name));
        ino += 1;
        img.extend_from_slice(data);
        while !img.len().is_multiple_of(4) {
            img.push(0);
        }
    };
    let mut name = String::new();
    for level in 0..depth {
        if !name.is_empty() {
            name.push('/');
        }
        name.push('d');
        push(&mut img, &name, 0o40755, b"");
        let files = if level >= depth / 2 { 10 } else { 1 };
        for f in 0..files {
            push(&mut img, &format!("{name}/{f}"), 0o100644, b"x");
        }
    }
    push(&mut img, "TRAILER!!!", 0, b"");
    let image = dir.join("deep.img");
    fs::write(&image, &img).unwrap();
    let mut verify = support::composer();
    verify.arg("verify").arg(&image);
    let o = run_within(&mut verify, Duration::from_secs(60)).expect("verify does not end");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("13000 entries"));
    let mut extract = support::composer();
    extract
        .arg("extract")
        .arg(&image)
        .arg("-C")
        .arg(dir.join("x"));
    let o = run_within(&mut extract, Duration::from_secs(60)).expect("extract does not end");
    assert!(o.status.success(), "{}", stderr(&o));
    // The deepest file, reached a directory at a time (its path is longer
    // than a system call takes).
    use rustix::fs::{openat, Mode, OFlags};
    let mut fd = rustix::fs::open(
        dir.join("x"),
        OFlags::DIRECTORY | OFlags::RDONLY,
        Mode::empty(),
    )
    .unwrap();
    for _ in 0..depth {
        fd = openat(&fd, "d", OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
    }
    let f = openat(&fd, "9", OFlags::RDONLY, Mode::empty()).unwrap();
    let mut got = String::new();
    fs::File::from(f).read_to_string(&mut got).unwrap();
    assert_eq!(got, "x");
}

// ---------------------------------------------------------------------------------------
// 14: messages with the user's location and the right subject
// ---------------------------------------------------------------------------------------

#[test]
fn messages_name_the_manifest_line_and_the_right_thing() {
    let dir = Scratch::new("messages");
    let m = sysroot(&dir);
    let segs = dir.join("segs.toml");
    fs::write(
        &segs,
        "root = \"sysroot\"\n\n[[segment]]\nname = \"main\"\ncompression = \"xz\"\nthreads = 20000\n",
    )
    .unwrap();
    fails_with(
        &support::run(&mut check(&segs)),
        &["segs.toml:6:11", "20000 compression threads"],
    );
    let align = dir.join("align.toml");
    fs::write(&align, "[defaults]\nalign = 4294967296\n").unwrap();
    fails_with(
        &support::run(&mut check(&align)),
        &["align.toml:2:9", "larger than 2147483648"],
    );
    // A source under /sys that reads shorter than it stats: the manifest line.
    let sysfs = "/sys/kernel/uevent_seqnum";
    if Path::new(sysfs).is_file() {
        let s = dir.join("sys.toml");
        fs::write(
            &s,
            format!("[[file]]\nsrc = \"{sysfs}\"\ndst = \"/seqnum\"\n"),
        )
        .unwrap();
        let o = support::run(&mut build(&s, &dir.join("sys.img")));
        fails_with(&o, &["sys.toml:1:1", "uevent_seqnum", "shorter"]);
    }
    // -o through an inherited pipe descriptor, as `-o >(cmd)` passes it.
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 3>&1; \"$0\" build {} -o /dev/fd/3 --no-sync",
            m.display()
        ))
        .arg(support::composer_bin())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        o.stdout.starts_with(b"070701"),
        "nothing reached the descriptor"
    );
}
